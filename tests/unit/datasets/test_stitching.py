from __future__ import annotations

import numpy as np

from rolloutfleet.datasets.stitching import observations, stitch


def rows(spec: list[tuple[int, int, bool]]) -> dict[str, np.ndarray]:
    """(eps_id, t, ends) per row; obs = [eps_id, t], new_obs = [eps_id, t + 1]."""
    eps = np.array([r[0] for r in spec], np.int64)
    t = np.array([r[1] for r in spec], np.int64)
    return {
        "eps_id": eps,
        "t": t,
        "terminateds": np.array([r[2] for r in spec]),
        "truncateds": np.zeros(len(spec), bool),
        "obs": np.stack([eps, t], 1).astype(np.float32),
        "new_obs": np.stack([eps, t + 1], 1).astype(np.float32),
    }


def test_fragments_from_several_workers_in_any_order_make_whole_episodes() -> None:
    # Episode 1: t 0..3 in two fragments, the later one first; episode 2 interleaved; 3 open.
    done, broken, still_open = stitch(rows([(1, 2, False), (2, 0, False), (1, 3, True), (3, 0, False),
                                            (1, 0, False), (2, 1, True), (1, 1, False)]))  # fmt: skip
    assert [(e.eps_id, e.columns["t"].tolist()) for e in done] == [(1, [0, 1, 2, 3]), (2, [0, 1])]
    assert broken == []
    assert still_open["eps_id"].tolist() == [3]
    first = done[0]
    assert observations(first)[:, 1].tolist() == [0, 1, 2, 3, 4]  # N + 1: the last new_obs
    assert first.terminated


def test_an_episode_that_ended_with_a_gap_is_broken_not_complete() -> None:
    done, broken, still_open = stitch(rows([(5, 1, False), (5, 2, True), (6, 0, False), (6, 2, True)]))
    assert done == [] and broken == [5, 6] and len(still_open["t"]) == 0


def test_a_row_seen_twice_counts_once() -> None:
    done, _, _ = stitch(rows([(1, 0, False), (1, 0, False), (1, 1, True)]))
    assert len(done) == 1 and len(done[0]) == 2


def test_no_rows() -> None:
    done, broken, still_open = stitch(rows([]))
    assert (done, broken, len(still_open["t"])) == ([], [], 0)

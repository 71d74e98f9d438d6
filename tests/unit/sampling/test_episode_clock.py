"""EpisodeClock against a step-by-step reading of gymnasium's autoreset rules.

The reference walks the rows one at a time, as the docs of ``AutoresetMode`` describe them:
NEXT_STEP spends the step after an end on the reset (no transition); SAME_STEP starts the
next episode in the row after the end. The clock must give every row the same valid flag,
episode id and ``t``, and the same ended episodes in the same order, whatever the chunking.
"""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.sampling.episode_clock import EpisodeClock


def reference(done: np.ndarray, rewards: np.ndarray, same_step: bool) -> tuple[list, list, list, list]:
    """(valid, episode number, t) per row and (env, episode number, return, length) per end."""
    steps, n = done.shape
    valid = np.zeros_like(done)
    episode, t = np.zeros(done.shape, np.int64), np.zeros(done.shape, np.int64)
    ends = []
    number, length, total = list(range(1, n + 1)), [0] * n, [0.0] * n
    started = n
    resetting = [False] * n
    for s in range(steps):
        for i in range(n):
            if resetting[i]:  # NEXT_STEP reset step: not a transition, whatever the env reports
                resetting[i] = False
                valid[s, i], episode[s, i], t[s, i] = False, number[i], -1
                continue
            valid[s, i], episode[s, i], t[s, i] = True, number[i], length[i]
            length[i] += 1
            total[i] += rewards[s, i]
            if done[s, i]:
                ends.append((s, i, number[i], total[i], length[i]))
                started += 1
                number[i], length[i], total[i] = started, 0, 0.0
                resetting[i] = not same_step
    order = sorted(ends)  # row-major: row, then env
    return valid.tolist(), episode.tolist(), t.tolist(), [(i, k, float(ret), n) for _, i, k, ret, n in order]


def run_clock(
    done: np.ndarray, rewards: np.ndarray, same_step: bool, chunks: list[int]
) -> tuple[list, list, list, list]:
    n = done.shape[1]
    clock = EpisodeClock(n, same_step, eps_base=0)
    clock.start(np.arange(n))
    valid = np.zeros(done.shape, np.bool_)
    eps_id, t = np.zeros(done.shape, np.int64), np.zeros(done.shape, np.int64)
    ends, a = [], 0
    for size in chunks:
        b = a + size
        ended = clock.advance(done[a:b], np.zeros_like(done[a:b]), rewards[a:b], valid[a:b], eps_id[a:b], t[a:b])
        assert ended.transitions == int(valid[a:b].sum())
        ends += [
            (int(i), int(eps_id[a + r, i]), float(ret), int(length))
            for r, i, ret, length in zip(ended.rows, ended.envs, ended.returns, ended.lengths, strict=True)
        ]
        a = b
    return valid.tolist(), eps_id.tolist(), t.tolist(), ends


@pytest.mark.parametrize("same_step", [False, True])
@pytest.mark.parametrize("num_envs", [1, 7, 160])  # 160: the wide path of cumsum_down
def test_rows_and_ends_match_the_step_by_step_reading(same_step: bool, num_envs: int) -> None:
    rng = np.random.default_rng(num_envs)
    done = rng.random((60, num_envs)) < 0.15
    rewards = rng.integers(-3, 4, done.shape).astype(np.float32)
    expected = reference(done, rewards, same_step)
    for chunks in ([60], [1] * 60, [7, 1, 20, 2, 30]):
        assert run_clock(done, rewards, same_step, chunks) == expected, chunks


def test_an_end_reported_on_a_reset_step_is_not_an_episode() -> None:
    # A careless NEXT_STEP env says "terminated" again on the reset step that follows an end.
    done = np.array([[True], [True], [False], [True]])
    clock = EpisodeClock(1, same_step=False, eps_base=0)
    clock.start(np.arange(1))
    valid, eps_id, t = np.zeros((4, 1), np.bool_), np.zeros((4, 1), np.int64), np.zeros((4, 1), np.int64)
    ended = clock.advance(done, done, np.ones((4, 1)), valid, eps_id, t)
    assert valid[:, 0].tolist() == [True, False, True, True]
    assert ended.lengths.tolist() == [1, 2] and ended.returns.tolist() == [1.0, 2.0]
    assert eps_id[:, 0].tolist() == [1, 2, 2, 2] and ended.new_ids.tolist() == [2, 3]


def test_a_failed_sub_env_last_row_is_no_transition_and_ends_nothing() -> None:
    clock = EpisodeClock(2, same_step=True, eps_base=5 << 40)
    first = clock.start(np.arange(2))
    assert first.tolist() == [(5 << 40) | 1, (5 << 40) | 2]
    done = np.array([[False, False], [True, True]])
    valid, eps_id, t = np.zeros((2, 2), np.bool_), np.zeros((2, 2), np.int64), np.zeros((2, 2), np.int64)
    ended = clock.advance(done, done, np.ones((2, 2)), valid, eps_id, t, failed=np.array([False, True]))
    assert valid.tolist() == [[True, True], [True, False]]
    assert ended.envs.tolist() == [0] and ended.lengths.tolist() == [2]
    assert clock.t.tolist() == [0, 2]  # sub-env 1's episode runs on, for the caller to drop

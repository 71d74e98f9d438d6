"""The recording folder through kills at every rename of a flush, and a full disk."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rolloutfleet.datasets.durable import OutputError
from rolloutfleet.datasets.parquet_files import read_columns
from rolloutfleet.datasets.stitching import stitch
from rolloutfleet.datasets.writer import DatasetWriter

SPACES = (gym.spaces.Box(-10, 10, (2,), np.float32), gym.spaces.Discrete(2))


class Killed(BaseException):
    """The process died here."""


def fragment(episodes: list[tuple[int, range, bool]]) -> dict[str, np.ndarray]:
    """Rows of (eps_id, its t range, whether the last one ends it)."""
    eps = np.concatenate([np.full(len(ts), e) for e, ts, _ in episodes]).astype(np.int64)
    t = np.concatenate([np.array(ts) for _, ts, _ in episodes]).astype(np.int64)
    ends = np.concatenate([np.arange(len(ts)) == len(ts) - 1 if end else np.zeros(len(ts), bool)
                           for _, ts, end in episodes])  # fmt: skip
    return {
        "obs": np.stack([eps % 7, t], 1).astype(np.float32),
        "new_obs": np.stack([eps % 7, t + 1], 1).astype(np.float32),
        "actions": (t % 2).astype(np.int64),
        "rewards": np.ones(len(t), np.float32),
        "terminateds": ends,
        "truncateds": np.zeros(len(t), bool),
        "eps_id": eps,
        "t": t,
    }


BATCHES = [
    fragment([(1, range(0, 3), False), (2, range(0, 2), True), (3, range(0, 4), False)]),
    fragment([(1, range(3, 5), True), (3, range(4, 6), False), (4, range(0, 1), True)]),
    fragment([(3, range(6, 7), True), (5, range(0, 3), True), (6, range(0, 2), False)]),
]


def writer(folder: Path, fmt: str) -> DatasetWriter:
    return DatasetWriter(folder, "job", fmt, spaces=SPACES if fmt == "minari" else None)


def episode_ids(folder: Path) -> list[int]:
    from minari.dataset.minari_dataset import MinariDataset

    dataset = MinariDataset(folder / "job-v0" / "data")
    return [int(m["eps_id"]) for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))]


def failing_at(monkeypatch: pytest.MonkeyPatch, name: str, call: int, error: Callable[[], BaseException]) -> Any:
    real = getattr(os, name)
    calls = {"n": 0}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == call:
            raise error()
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, wrapped)
    return calls


@pytest.mark.parametrize("fmt", ["minari", "parquet"])
def test_a_kill_at_any_rename_of_a_flush_loses_and_duplicates_nothing(tmp_path: Path, fmt: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    everything = {name: np.concatenate([b[name] for b in BATCHES]) for name in BATCHES[0]}
    complete = sorted(e.eps_id for e in stitch(everything)[0])
    kill_at = 1
    while True:
        folder = tmp_path / f"{fmt}-{kill_at}"
        first = writer(folder, fmt)
        first.write(BATCHES[0])
        first.flush()
        first.write(BATCHES[1])
        calls = failing_at(monkeypatch, "replace", kill_at, Killed)
        try:
            first.flush()
            finished = True
        except Killed:
            finished = False
        monkeypatch.undo()
        again = writer(folder, fmt)  # the restart
        again.write(BATCHES[2])
        again.close()
        if fmt == "minari":
            assert sorted(episode_ids(folder)) == complete, f"killed at rename {kill_at}"
            assert again.open_rows() == 2  # episode 6: open, kept, not written
        else:
            rows = read_columns(folder)
            keys = sorted(zip(rows["eps_id"].tolist(), rows["t"].tolist(), strict=True))
            assert keys == sorted(zip(everything["eps_id"].tolist(), everything["t"].tolist(), strict=True))
        assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".staging")]
        if finished:
            break
        assert calls["n"] >= kill_at
        kill_at += 1
    assert kill_at > 1


@pytest.mark.parametrize("fmt", ["minari", "parquet"])
def test_a_full_disk_is_one_line_and_leaves_no_visible_file(tmp_path: Path, fmt: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    folder = tmp_path / fmt
    recording = writer(folder, fmt)
    recording.write(BATCHES[0])
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    failing_at(monkeypatch, "fsync", 1, lambda: OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(OutputError) as raised:
        recording.write(BATCHES[1])  # the spool write: the caller acknowledges nothing
    message = str(raised.value)
    assert "No space left on device" in message and "\n" not in message and str(folder) in message
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    monkeypatch.undo()
    failing_at(monkeypatch, "fsync", 1, lambda: OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(OutputError):
        recording.flush()  # the data files
    monkeypatch.undo()
    visible = [p for p in folder.rglob("*") if p.name.endswith((".parquet", ".tmp")) or p.name.startswith(".staging")]
    assert visible == [] if fmt == "parquet" else not [p for p in visible if ".staging" in str(p)]
    again = writer(folder, fmt)  # space again: the spooled rows are all still there
    again.write(BATCHES[1])
    again.close()
    if fmt == "parquet":
        assert len(read_columns(folder)["t"]) == sum(len(b["t"]) for b in BATCHES[:2])
    else:
        assert sorted(episode_ids(folder)) == [1, 2, 4]


def test_unwritable_output_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match="cannot create") as raised:
        DatasetWriter(blocker / "out", "job", "parquet")
    assert "\n" not in str(raised.value)

from __future__ import annotations

from pathlib import Path

import pytest

from rolloutfleet.datasets.state import RecordingState, read_state, refusal, write_state
from rolloutfleet.datasets.writer import DatasetWriter, RecordingRefused


def test_another_jobs_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    write_state(tmp_path, RecordingState("parquet", "default", "cartpole"))
    problem = refusal(tmp_path, RecordingState("parquet", "default", "pong"))
    assert problem is not None and "\n" not in problem
    assert "job default/cartpole" in problem and "job default/pong" in problem
    with pytest.raises(RecordingRefused, match="holds the parquet recording of job default/cartpole"):
        DatasetWriter(tmp_path, "pong", "parquet")
    assert refusal(tmp_path, RecordingState("parquet", "default", "cartpole")) is None  # the same job: continued


def test_a_folder_with_other_files_is_refused_and_an_empty_one_taken(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert "not empty" in (refusal(tmp_path, RecordingState("minari", "default", "cartpole")) or "")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refusal(empty, RecordingState("minari", "default", "cartpole")) is None


def test_the_state_round_trips(tmp_path: Path) -> None:
    state = RecordingState("minari", "ns", "job", None, consumed_upto=4, carry="carry-0000000004.npz", episodes=3)
    write_state(tmp_path, state)
    assert read_state(tmp_path) == state
    assert not list(tmp_path.glob(".*.tmp"))

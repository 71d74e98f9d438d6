"""Whole files or none: a full disk (a real 64 KiB tmpfs) leaves no partial file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rolloutfleet.cli.npz_output import OutputError, npz_path, write_npz
from tests import disk_kit


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    with disk_kit.tiny_disk(tmp_path) as mount:
        yield mount


def test_the_path_written_is_the_one_returned(tmp_path: Path) -> None:
    written = write_npz(tmp_path / "noext", {"a": np.arange(3)})
    assert written == tmp_path / "noext.npz" and written.exists() and not (tmp_path / "noext").exists()
    with np.load(written, allow_pickle=False) as data:
        assert data["a"].tolist() == [0, 1, 2]
    assert npz_path(tmp_path / "b.npz") == tmp_path / "b.npz"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext.npz"]  # no temporary left


def test_a_full_disk_is_one_line_and_leaves_no_file(tiny_disk: Path) -> None:
    big = {"obs": np.ones((100_000,), np.float64)}  # 800 KB on a 64 KiB disk
    with pytest.raises(OutputError) as raised:
        write_npz(tiny_disk / "out.npz", big)
    assert str(raised.value) == f"cannot write {tiny_disk / 'out.npz'}: No space left on device"
    assert list(tiny_disk.iterdir()) == []


def test_a_full_disk_keeps_the_previous_file_whole(tiny_disk: Path) -> None:
    write_npz(tiny_disk / "out.npz", {"a": np.arange(10)})
    with pytest.raises(OutputError):
        write_npz(tiny_disk / "out.npz", {"a": np.ones(100_000)})
    with np.load(tiny_disk / "out.npz", allow_pickle=False) as data:
        assert data["a"].tolist() == list(range(10))
    assert [p.name for p in tiny_disk.iterdir()] == ["out.npz"]


def test_an_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError, match=r"cannot write .*Not a directory"):
        write_npz(blocker / "out.npz", {"a": np.arange(3)})

"""The recording's write-ahead spool: every batch taken from the stream is written here,
durably, before its entry is acknowledged, so the recorder never holds the fleet's stream
entries while it waits for an episode to end or a file to fill.

A segment is one ``.npz`` (numpy only, read with ``allow_pickle=False``): the batch columns
plus ``__stream``/``__entry`` naming the stream entries it holds (a restart acknowledges
those first: written here, maybe not acknowledged before the kill). Segments are numbered;
the recording's state says up to which number they were turned into files
(``consumed_upto``) and which ``carry-<n>.npz`` holds the rows still waiting (the open
episodes of a Minari recording).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from rolloutfleet.datasets.durable import write_atomic

STREAM = "__stream"
ENTRY = "__entry"
_SEGMENT = re.compile(r"^seg-(\d{10})\.npz$")


def _save(path: Path, arrays: Mapping[str, np.ndarray]) -> int:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    data = buffer.getvalue()

    def write(file: BinaryIO) -> None:
        file.write(data)

    write_atomic(path, write)
    return len(data)


def load_columns(path: Path) -> tuple[dict[str, np.ndarray], list[tuple[str, str]]]:
    """The columns of a segment (or carry) and the stream entries it holds."""
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    streams, entries = arrays.pop(STREAM, np.array([], str)), arrays.pop(ENTRY, np.array([], str))
    return arrays, list(zip(streams.tolist(), entries.tolist(), strict=True))


class Spool:
    """The segments under ``folder`` (``<recording>/.spool``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.bytes = 0
        """Bytes in the live segments (what the next flush turns into files)."""

    def segments(self, after: int) -> list[tuple[int, Path]]:
        """The live segments: numbered above ``after``, oldest first."""
        found = []
        for path in self.folder.iterdir():
            match = _SEGMENT.match(path.name)
            if match and int(match.group(1)) > after:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def append(self, seq: int, columns: Mapping[str, np.ndarray], entries: Sequence[tuple[str, str]]) -> None:
        arrays = dict(columns)
        arrays[STREAM] = np.array([stream for stream, _ in entries], str)
        arrays[ENTRY] = np.array([entry for _, entry in entries], str)
        self.bytes += _save(self.folder / f"seg-{seq:010d}.npz", arrays)

    def write_carry(self, number: int, columns: Mapping[str, np.ndarray]) -> str:
        name = f"carry-{number:010d}.npz"
        _save(self.folder / name, columns)
        return name

    def tidy(self, consumed_upto: int, carry: str | None) -> None:
        """Remove segments turned into files and carries the state no longer names."""
        for path in self.folder.iterdir():
            match = _SEGMENT.match(path.name)
            stale_segment = match is not None and int(match.group(1)) <= consumed_upto
            stale_carry = path.name.startswith("carry-") and path.name != carry
            if stale_segment or stale_carry or path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)

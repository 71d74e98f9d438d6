"""What a recording folder holds, in one small JSON file written atomically after the data
files: the commit point. A file the state does not count (written just before a kill) is
removed when the recording resumes, and its rows come again from the spool.

    {"format": "parquet", "namespace": "default", "job": "cartpole", "policy": null,
     "consumed_upto": 41, "carry": "carry-0000000041.npz", "parts": 3, "rows": 120000,
     "episodes": 0, "steps": 0, "broken_episodes": 0}
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rolloutfleet.datasets.durable import OutputError, write_atomic

STATE_FILE = "_rolloutfleet.json"
"""Beside the data (pyarrow's datasets skip names that begin with ``_`` or ``.``)."""
FORMATS = ("parquet", "minari")


@dataclass(frozen=True)
class RecordingState:
    format: str
    namespace: str
    job: str
    policy: str | None = None
    consumed_upto: int = 0
    """Spool segments numbered up to this one are in the data files."""
    carry: str | None = None
    """The spool file of rows still waiting (open episodes), if any."""
    parts: int = 0
    """Parquet: files ``part-0000000000.parquet`` ... written."""
    rows: int = 0
    episodes: int = 0
    """Minari: episodes written (their ids are 0 .. episodes - 1)."""
    steps: int = 0
    broken_episodes: int = 0
    """Minari: episodes that ended with rows missing, not written."""
    group: str | None = None
    """The consumer group ``rolloutfleet record`` reads this recording's batches as."""

    def source(self) -> str:
        where = f"{self.namespace}/{self.job}" + (f" policy {self.policy}" if self.policy else "")
        return f"{self.format} recording of job {where}"

    def advanced(self, **changes: Any) -> RecordingState:
        return replace(self, **changes)


def read_state(folder: Path) -> RecordingState | None:
    path = folder / STATE_FILE
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
        return RecordingState(**raw)
    except (OSError, ValueError, TypeError) as exc:
        raise OutputError(f"{path} is not a RolloutFleet recording state: {exc}") from None


def write_state(folder: Path, state: RecordingState) -> None:
    data = json.dumps(asdict(state), indent=1).encode()
    write_atomic(folder / STATE_FILE, lambda file: _write(file, data))


def _write(file: Any, data: bytes) -> None:
    file.write(data)


def refusal(folder: Path, wanted: RecordingState) -> str | None:
    """Why ``folder`` cannot take ``wanted``'s recording (it holds another), or None."""
    found = read_state(folder)
    if found is None:
        others = [p.name for p in folder.iterdir() if not p.name.startswith((".", "_"))] if folder.is_dir() else []
        if others:
            return f"{folder} is not empty and holds no recording (found {sorted(others)[:3]}): choose an empty folder"
        return None
    same = (found.format, found.namespace, found.job, found.policy) == (
        wanted.format, wanted.namespace, wanted.job, wanted.policy,
    )  # fmt: skip
    if not same:
        return f"{folder} holds the {found.source()}, not the {wanted.source()}: choose another folder"
    return None

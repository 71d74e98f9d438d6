"""Output paths checked before any work is done: a command that would sample for minutes or
acknowledge batches first learns whether it can write its file at all."""

from __future__ import annotations

import tempfile
from pathlib import Path


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written (one line), or None. Its directory is created if missing.

    >>> output_problem(Path("/proc/no/such.npz")) is not None
    True
    """
    if path.is_dir():
        return f"{path} is a directory"
    above = next((p for p in path.parents if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"cannot write {path}: {above} is not a directory"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}"
    return None

"""``.npz`` files written whole or not at all: the arrays go to a temporary file beside the
target, are fsynced, then renamed over it, so a full disk or a killed command never leaves
a half-written file where a reader expects one. numpy's own rule for the name is kept
(``--output noext`` writes ``noext.npz``), and the path written is the one reported."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class OutputError(OSError):
    """A file could not be written; the message is one line naming it, nothing is left behind."""


def npz_path(path: str | Path) -> Path:
    """Where numpy's ``savez`` puts ``path``: with ``.npz`` appended unless it ends so.

    >>> npz_path("noext"), npz_path("a/b.npz"), npz_path("x.NPZ")
    (PosixPath('noext.npz'), PosixPath('a/b.npz'), PosixPath('x.NPZ.npz'))
    """
    path = Path(path)
    return path if path.name.endswith(".npz") else path.with_name(path.name + ".npz")


def write_npz(path: str | Path, arrays: Mapping[str, Any], compress: bool = False) -> Path:
    """Write ``arrays`` to :func:`npz_path` of ``path`` atomically; returns the path written.
    Raises :class:`OutputError` (one line) when it cannot, leaving no file behind."""
    import numpy as np

    target = npz_path(path)
    save = np.savez_compressed if compress else np.savez
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as file:
            save(file, **arrays)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise OutputError(f"cannot write {target}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(target.parent)
    return target


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable (a crash right after still finds the new file)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

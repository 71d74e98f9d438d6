"""Files that appear whole or not at all: write to a hidden temporary name, fsync, rename,
fsync the directory. A reader (or a recorder restarted after a kill) never sees half a file.

Every failure to write (disk full, read-only, permission) is an :class:`OutputError`, one
line naming the path, with the temporary file removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class OutputError(Exception):
    """The output cannot be written (one line: which path and why)."""


def describe(exc: OSError) -> str:
    return exc.strerror or str(exc)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(file)`` so that it appears complete or not at all."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise OutputError(f"cannot write {path}: {describe(exc)}") from None


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (a staged Minari episode)."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(Path(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(folder))


def sync_all(folder: Path) -> None:
    """Flush every file written on ``folder``'s filesystem at once (Linux ``syncfs(2)``;
    elsewhere ``sync(2)``): for a folder of many small files, one call instead of an fsync
    each. ``OutputError`` when the filesystem reports a failed write."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "syncfs"):
        os.sync()
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            error = ctypes.get_errno()
            raise OutputError(f"cannot write {folder}: {os.strerror(error)}")
    finally:
        os.close(fd)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def make_dir(path: Path) -> None:
    """Create ``path`` (and parents) and prove it takes files; OutputError otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {path}: {describe(exc)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write in {path}: permission denied")

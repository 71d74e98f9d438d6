"""Child processes a bench starts, and the guarantee that none outlives it.

:func:`spawn` starts each child in its own process group with ``PR_SET_PDEATHSIG``
(Linux: the kernel SIGKILLs it when the bench dies, even by SIGKILL) and records it;
:func:`kill_all` (run from ``finally``, at exit, and on SIGTERM/SIGHUP, which become
:class:`SystemExit` so that ``finally`` blocks run) sends SIGTERM to each group, waits,
then SIGKILLs what is left. :func:`guard` installs the exit hooks once.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

_CHILDREN: list[subprocess.Popen[bytes]] = []
_GUARDED = False
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child, between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``args`` (output to ``log``) as a recorded child that cannot outlive the bench."""
    guard()
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent
        )
    _CHILDREN.append(process)
    return process


def stop(process: subprocess.Popen[Any], grace_s: float = 10.0) -> int | None:
    """SIGTERM the child's group, SIGKILL it after ``grace_s``; its exit status."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # also any grandchild left in the group
    status = process.wait()
    if process in _CHILDREN:
        _CHILDREN.remove(process)
    return status


def kill_all(grace_s: float = 10.0) -> None:
    """Stop every recorded child (newest first)."""
    for process in reversed(list(_CHILDREN)):
        stop(process, grace_s)


def alive() -> list[int]:
    """Pids of recorded children still running."""
    return [p.pid for p in _CHILDREN if p.poll() is None]


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def guard() -> None:
    """Install the exit hooks (once): atexit, and SIGTERM/SIGHUP as SystemExit."""
    global _GUARDED
    if _GUARDED:
        return
    _GUARDED = True
    atexit.register(kill_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread: atexit still holds
            signal.signal(signum, _exit_on_signal)

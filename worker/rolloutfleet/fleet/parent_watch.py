"""Nothing outlives ``rolloutfleet run``, even when the supervisor dies by SIGKILL.

Workers (our own Python) watch their parent: the fleet passes its pid in
``ROLLOUTFLEET_PARENT_PID``, and a daemon thread compares it with ``os.getppid()`` four times
a second; once re-parented, the worker SIGTERMs itself and, past the grace period, exits hard.
redis-server (a binary we cannot change) gets ``prctl(PR_SET_PDEATHSIG, SIGTERM)`` between
fork and exec (:func:`die_with_parent`), only when forked from the main thread. Why two
mechanisms (the kernel's signal follows the forking *thread*): docs/architecture.md
("Nothing outlives rolloutfleet run").
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping

from rolloutfleet.spec.job import SpecError

log = logging.getLogger(__name__)

PARENT_PID_ENV = "ROLLOUTFLEET_PARENT_PID"
"""Set by ``rolloutfleet run`` for its workers: the supervisor's pid."""
ORPHAN_GRACE_S = 10.0
"""How long an orphaned worker's graceful stop may take before it exits hard (the
fleet's own grace period)."""
_PR_SET_PDEATHSIG = 1


def watch_parent(
    parent_pid: int,
    on_orphaned: Callable[[], None],
    grace_s: float = ORPHAN_GRACE_S,
    interval_s: float = 0.25,
    hard_exit: Callable[[int], None] = os._exit,
) -> threading.Thread:
    """Start a daemon thread that calls ``on_orphaned()`` once this process's parent is no
    longer ``parent_pid`` (at once if it already is not), then ``hard_exit(1)`` if the
    process is still running ``grace_s`` later."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        log.warning("supervisor %d is gone (parent is now %d): stopping", parent_pid, os.getppid())
        on_orphaned()
        time.sleep(grace_s)
        log.error("still running %.0f s after the supervisor died: exiting hard", grace_s)
        hard_exit(1)

    thread = threading.Thread(target=watch, name="parent-watch", daemon=True)
    thread.start()
    return thread


def stop_self() -> None:
    """SIGTERM this process: the signal handler runs in the main thread, where blocking
    sleeps and reads are interrupted, exactly as for a SIGTERM from outside."""
    os.kill(os.getpid(), signal.SIGTERM)


def parent_pid_from(environ: Mapping[str, str]) -> int | None:
    """The supervisor's pid from ``ROLLOUTFLEET_PARENT_PID``; None when unset (a pod)."""
    raw = environ.get(PARENT_PID_ENV, "")
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError(f"{PARENT_PID_ENV}: must be a process id, got {raw!r}")
    return int(raw)


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies, or None
    where that cannot be relied on (not Linux, or not the main thread: see the module doc)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    # Resolved here, in the parent: between fork and exec only the call itself runs.
    death_signal = ctypes.c_ulong(int(signal.SIGTERM))

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, death_signal)
        if os.getppid() != parent:
            # The parent died between fork and prctl: the signal will never come.
            os._exit(1)

    return preexec

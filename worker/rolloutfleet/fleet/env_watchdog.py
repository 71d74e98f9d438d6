"""The worker's watchdog over env calls: a constructor, ``reset`` or ``step`` that hangs.

A thread reads the sampling loop's stamp (:data:`rolloutfleet.sampling.env.calls.ENV_CALL`)
once a second. A call still running after ``spec.env.callTimeoutSeconds`` is said once
(a log line naming the sub-env and the call), counted (``rolloutfleet_env_call_timeouts``),
made ``/healthz`` unhealthy and put in a last heartbeat; then the worker ends with exit 3 and
that line (stderr and the termination message). The sampling thread is stuck inside the env,
so the end is ``os._exit`` from this thread, after killing the env processes (``async``).

A stop signal during a hang: the handler runs (a Python env that sleeps or loops lets it),
but the call does not return; once a call has run :data:`STOP_WAIT_S` past the stop, the
worker leaves without it (exit 0, one log line), well within the grace period. An env in
C code that never releases the GIL stops this thread too: the liveness probe's stall check,
then the kubelet's SIGKILL, end that one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rolloutfleet.sampling.env.calls import ENV_CALL, CallStamp, overdue, stuck

if TYPE_CHECKING:
    from rolloutfleet.spec.sections.env_spec import EnvSpec

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0
"""After a stop signal, how long an env call may still run before the worker leaves without it."""
EXIT_STUCK = 3
LAST_BEAT_S = 2.0


@dataclass(frozen=True)
class Verdict:
    """What the watchdog decided: leave with ``code``, saying ``line``."""

    code: int
    line: str
    stuck: bool
    """True for a call past the timeout (said as a failure); False for a stop it outlasted."""


class EnvWatchdog:
    """Decides, from the stamp and the clock (:meth:`check`, pure), and acts on a thread."""

    def __init__(self, env: str, timeout_s: float, stamp: CallStamp = ENV_CALL, stop_wait_s: float = STOP_WAIT_S):
        self.env = env
        self.timeout_s = timeout_s
        self.stamp = stamp
        self.stop_wait_s = stop_wait_s
        self.stop_requested_at: float | None = None
        self._closed = threading.Event()

    def request_stop(self, now: float | None = None) -> None:
        """A stop signal arrived (safe in a signal handler)."""
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic() if now is None else now

    def check(self, now: float) -> Verdict | None:
        """The verdict for the call in progress at ``now`` (``time.monotonic()``), or None."""
        current = self.stamp.current
        late = overdue(current, now, self.timeout_s)
        if late is not None:
            return Verdict(EXIT_STUCK, late.describe(self.env, self.timeout_s), stuck=True)
        asked = self.stop_requested_at
        if current is None or asked is None or now - max(asked, current[2]) < self.stop_wait_s:
            return None
        call = stuck(current, now)
        where = "the vector env" if call.sub_env is None else f"sub-env {call.sub_env}"
        line = (
            f"stopping: {self.env}: {where} {call.call} still running {now - asked:.0f} s after the stop signal "
            f"(for {call.running_s:.0f} s); leaving without it"
        )
        return Verdict(0, line, stuck=False)

    def start(self, act: Callable[[Verdict], None], period_s: float = 1.0) -> None:
        """Check every ``period_s`` on a daemon thread; ``act`` on the first verdict (it ends
        the process: see :func:`leave`)."""

        def watch() -> None:
            while not self._closed.wait(period_s):
                verdict = self.check(time.monotonic())
                if verdict is not None:
                    act(verdict)
                    return

        threading.Thread(target=watch, name="env-watchdog", daemon=True).start()

    def close(self) -> None:
        self._closed.set()


def leave(
    verdict: Verdict,
    report: Callable[[str], None],
    cleanup: Callable[[], None],
    last_beat: Callable[[], None] | None = None,
    logged: bool = True,
) -> None:
    """End the process as ``verdict`` says: a stuck call is logged, ``last_beat`` written (a
    heartbeat saying so; at most :data:`LAST_BEAT_S`: Redis may be away too) and ``report``-ed
    (stderr and the termination message); a stop outlasted is a log line. ``cleanup`` (kill
    the env processes) runs, then ``os._exit``: the sampling thread cannot unwind.
    ``logged=False``: the report is the one line (a command's, not a worker's log)."""
    if verdict.stuck:
        if logged:
            log.error("%s", verdict.line)
        if last_beat is not None:
            beat = threading.Thread(target=_quietly(last_beat), name="last-heartbeat", daemon=True)
            beat.start()
            beat.join(LAST_BEAT_S)
        report(verdict.line)
    else:
        log.warning("%s", verdict.line)
    with contextlib.suppress(Exception):
        cleanup()
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(verdict.code)


def _quietly(call: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            call()
        except Exception as exc:  # noqa: BLE001 - a last heartbeat is best effort
            log.warning("the last heartbeat was not written: %s", exc)

    return run


def watch_command(command: str, spec: EnvSpec) -> EnvWatchdog:
    """The watchdog of a command that builds or steps the job's env in its own process
    (``validate``, ``sample``, ``evaluate``), as a worker's: an env call past
    ``spec.env.callTimeoutSeconds`` ends the command with exit 3 and one line naming the
    sub-env and the call (``rolloutfleet <command>: ...``), instead of a hang. Close it after."""
    from rolloutfleet.sampling.env.failures import env_name
    from rolloutfleet.sampling.vector.processes import kill_env_processes

    watchdog = EnvWatchdog(env_name(spec), spec.call_timeout_seconds)

    def report(line: str) -> None:
        print(f"rolloutfleet {command}: {line}", file=sys.stderr)

    watchdog.start(lambda verdict: leave(verdict, report, kill_env_processes, logged=False))
    return watchdog

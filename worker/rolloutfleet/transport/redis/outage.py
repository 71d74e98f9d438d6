"""How a long-running process (a worker, an evaluation worker) rides out a Redis that is away
or refusing it, in one place: never a crash loop, never a silent wait.

* A refused password (:data:`~rolloutfleet.transport.redis.errors.CredentialsRefused`): the
  one line to end with. Waiting does not fix a password; the process is replaced and its
  successor reads the Secret again.
* NOPERM (:data:`~rolloutfleet.transport.redis.errors.PermissionRefused`: the job's ACL
  user revoked or narrowed mid-run): not ready, said once per distinct refusal, retried
  with backoff up to 30 s (the operator re-applies the job's users).
* Redis away (a retryable error): not ready, a WARNING each time naming the error and
  the pause, retried with backoff up to 10 s; while the process never reached Redis, up
  to a start-up bound, then the one line to end with.

    >>> outage = OutageLoop("redis://127.0.0.1:6379/0", sleep=time.sleep, unready=print)  # doctest: +SKIP
    >>> while True:                                                                       # doctest: +SKIP
    ...     try:
    ...         step()
    ...         outage.succeeded()
    ...     except outage.errors as exc:
    ...         if (line := outage.failed(exc)) is not None:
    ...             sys.exit(line)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rolloutfleet.transport.redis.errors import CredentialsRefused, PermissionRefused
from rolloutfleet.transport.redis.reachability import address, failure_line
from rolloutfleet.transport.redis.retry import RETRYABLE, Backoff

AWAY_BACKOFF = (0.5, 10.0)
"""First and longest pause while Redis is away (s)."""
REFUSED_BACKOFF = (0.5, 30.0)
"""First and longest pause while Redis refuses a command (NOPERM) (s)."""


class OutageLoop:
    """The failures of one process's Redis calls, met the same way everywhere (see the module).

    ``url``: the Redis, named (never with its password) in what is said. ``sleep``: how the
    process waits (it keeps its probes beating and ends the pause on a stop). ``unready``:
    told the reason while Redis fails. ``counted``: told of each failure but a refused
    password (a metric). ``retryable``: what counts as Redis being away, beyond
    :data:`RETRYABLE` (a worker adds a lost transaction). ``startup_bound_s``: how long a
    process that never reached Redis keeps trying (None: for ever). ``log``: the caller's
    logger, so the lines carry its name.
    """

    def __init__(
        self,
        url: str,
        *,
        sleep: Callable[[float], None],
        unready: Callable[[str], None],
        counted: Callable[[], None] = lambda: None,
        retryable: tuple[type[Exception], ...] = RETRYABLE,
        startup_bound_s: float | None = None,
        log: logging.Logger | None = None,
    ) -> None:
        self.where = address(url)
        self.sleep, self.unready, self.counted = sleep, unready, counted
        self.retryable = retryable
        self.errors: tuple[type[Exception], ...] = (CredentialsRefused, PermissionRefused, *retryable)
        """What :meth:`failed` meets: catch these around the calls."""
        self.startup_bound_s = startup_bound_s
        self.began = time.monotonic()
        self.log = log or logging.getLogger(__name__)
        self.away = Backoff(*AWAY_BACKOFF)
        self.refused = Backoff(*REFUSED_BACKOFF)
        self._last_refusal = ""

    def succeeded(self) -> None:
        """A call went through: the next failure starts from the shortest pause again."""
        self.away.reset()
        self.refused.reset()
        self._last_refusal = ""

    def fatal(self, exc: Exception) -> str | None:
        """The line to end with when ``exc`` cannot be waited out (a refused password)."""
        return failure_line(exc, self.where) if isinstance(exc, CredentialsRefused) else None

    def failed(self, exc: Exception, *, starting: bool = False, wait: bool = True) -> str | None:
        """Meet one failure: the line to end with (a refused password; Redis never reached
        past the start-up bound while ``starting``), or None once the pause is over.
        ``wait=False``: counted and unready, no pause and nothing said (a process stopping
        has its own short last try). Anything but :attr:`errors` is raised again."""
        if (line := self.fatal(exc)) is not None:
            return line
        self.counted()
        if isinstance(exc, PermissionRefused):
            self._refused(exc, wait)
            return None
        if not isinstance(exc, self.retryable):
            raise exc
        self.unready(f"redis: {exc}")
        bound = self.startup_bound_s
        if starting and bound is not None and time.monotonic() - self.began >= bound:
            return f"{failure_line(exc, self.where)} (tried for {bound:g} s)"
        if wait:
            pause = self.away.next()
            self.log.warning("redis unavailable (%s); retrying in %.1f s", exc, pause)
            self.sleep(pause)
        return None

    def _refused(self, exc: Exception, wait: bool) -> None:
        line = f"redis at {self.where} refused a command: NOPERM {' '.join(str(exc).split())}"
        self.unready("redis: NOPERM (the job's Redis user lacks a permission)")
        if line != self._last_refusal:
            self._last_refusal = line
            self.log.error("%s; retrying until the job's Redis user allows it again", line)
        if wait:
            self.sleep(self.refused.next())

"""Which errors mean "Redis is away, try again", what each means in words a user can act
on, and the loop that retries them.

**Deadlines.** A :class:`RetryLoop` keeps calling while Redis refuses connections
(restarting), does not answer (paused: SIGSTOP, a frozen VM, a long fork), is still
loading its data set, or refuses writes (out of memory, a read-only replica), until
``timeout_s`` after the call began; then it raises :class:`RedisUnavailable`, one line
naming the server, how long it was tried and the last error. A call in flight when Redis
stops answering fails after the client's socket timeout, so that must be shorter than the
deadline: the clients here keep it well below theirs. A wrong password is one line at
once (:class:`RedisAuthRefused`: waiting does not fix it), while a worker's own loop
keeps trying (the Secret may be fixed).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from redis.cluster import RedisCluster

from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV

RETRYABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,  # a restarted server still loading its data set
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,  # a replica during failover
    redis.exceptions.OutOfMemoryError,  # maxmemory reached (noeviction): room comes back as learners consume
    redis.exceptions.ClusterError,  # a cluster failing over: CLUSTERDOWN, redirections exhausted
    redis.exceptions.SlotNotCoveredError,  # a slot whose master is gone, before its replica took over
    redis.exceptions.MovedError,  # a node client of a slot that moved (failover): re-routed, then retried
    ConnectionResetError,
)
"""Errors after which the same call may succeed later (Redis restarting, failing over, full)."""


class RedisUnavailable(redis.ConnectionError):
    """Redis stayed away (or kept refusing writes) past a caller's deadline; the message is
    one line saying where, for how long, and the last error. A ``ConnectionError``, so a
    caller with a retry loop of its own (a worker) still treats it as Redis being away."""


class RedisAuthRefused(RedisUnavailable, redis.AuthenticationError):
    """Redis refused the password: never retried (it will not become right by waiting). One
    line, as :class:`RedisUnavailable`; also an ``AuthenticationError``, so a caller that
    tells a refused password from an outage (a worker exits, rather than waiting) still can."""


def refresh_routes(client: redis.Redis | None) -> None:
    """A cluster client reads the slot map again (after an error: a master may have failed
    over); nothing for a plain client, nor while no node answers."""
    if isinstance(client, RedisCluster):
        try:
            cast(Any, client).nodes_manager.initialize()
        except (*RETRYABLE, redis.exceptions.RedisClusterException):
            pass


def explain(exc: BaseException) -> str:
    """What a retryable error means, in words a user can act on (one line)."""
    if isinstance(exc, redis.AuthenticationError):
        return f"authentication refused ({' '.join(str(exc).split())}): check the password (spec.redis.passwordSecret)"
    if isinstance(exc, redis.exceptions.ClusterDownError | redis.exceptions.SlotNotCoveredError):
        return f"the Redis Cluster is down ({' '.join(str(exc).split())}): a hash slot has no master"
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return (
            "it refuses writes: out of memory (maxmemory reached with policy noeviction); "
            "learners consuming free room, or raise maxmemory"
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return "it refuses writes: it is a read-only replica (failing over?)"
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        return "it is still loading its data set"
    if "max number of clients reached" in str(exc):
        return (
            "it refuses new connections: max number of clients reached (each worker holds 2: raise its "
            "maxclients, the chart's redis.maxClients, or spread the fleet over a Redis Cluster)"
        )
    if untrusted_certificate(exc):
        return f"TLS: its certificate is not trusted (the CA: ${CA_FILE_ENV}, spec.redis.tls.caSecret): {' '.join(str(exc).split())}"
    return " ".join(str(exc).split()) or type(exc).__name__


def untrusted_certificate(exc: BaseException) -> bool:
    """Whether ``exc`` is a TLS server whose certificate the CA given does not verify."""
    return "certificate verify failed" in str(exc).lower()


T = TypeVar("T")

log = logging.getLogger("rolloutfleet.transport")

SAY_AFTER_S = 2.0
"""A call that has failed this long says so (one WARNING), then every :data:`SAY_EVERY_S`:
a learner whose Redis is away is told within seconds, not after the reconnect deadline."""
SAY_EVERY_S = 30.0


class Backoff:
    """Exponential backoff, the one every wait here uses: ``first_s``, doubled after each
    :meth:`next` up to ``cap_s``, back to ``first_s`` at :meth:`reset` (a success).

    >>> backoff = Backoff(0.5, 2.0)
    >>> [backoff.next() for _ in range(4)]
    [0.5, 1.0, 2.0, 2.0]

    ``jitter``: each pause drawn uniformly from its upper half (full jitter, halved), so that
    many clients of a restarted Redis do not come back in step.
    """

    def __init__(self, first_s: float, cap_s: float, jitter: bool = False) -> None:
        if not 0 < first_s <= cap_s:
            raise ValueError(f"backoff: need 0 < first ({first_s}) <= cap ({cap_s})")
        self.first_s, self.cap_s, self.jitter = first_s, cap_s, jitter
        self.delay_s = first_s
        """The pause :meth:`next` returns next (before jitter)."""

    def next(self) -> float:
        """The pause to take now; the one after it doubles, up to the cap."""
        pause = self.delay_s
        self.delay_s = min(self.delay_s * 2, self.cap_s)
        return random.uniform(pause / 2, pause) if self.jitter else pause

    def reset(self) -> None:
        self.delay_s = self.first_s


DEFAULT_RECONNECT_TIMEOUT_S = 120.0
"""How long a learner-side call (consume, publish weights, look) rides out a Redis that is
away before it fails with :class:`RedisUnavailable`: a Redis pod rescheduled, restarted or
paused takes well under that. Workers retry for ever in their own loop instead."""


class RetryLoop:
    """Exponential backoff with jitter for calls that fail while Redis restarts.

    >>> loop = RetryLoop(timeout_s=30)
    >>> loop.call(lambda: 42)
    42

    ``stop``: once set, a failed attempt is re-raised at once instead of retried, and a
    backoff sleep in progress ends: a process told to stop must not spend its grace period
    waiting for a Redis that is gone.

    ``where``: the server, for the message of :class:`RedisUnavailable` (see :func:`where`)
    and the WARNING a call that keeps failing logs after ``say_after_s`` (then every
    :data:`SAY_EVERY_S`): never a silent wait.
    """

    def __init__(
        self,
        timeout_s: float,
        first_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        stop: threading.Event | None = None,
        where: str = "",
        say_after_s: float = SAY_AFTER_S,
    ) -> None:
        if timeout_s < 0:
            raise ValueError(f"reconnect timeout must be >= 0 s, got {timeout_s}")
        self.timeout_s = timeout_s
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.where = where
        self.say_after_s = say_after_s
        self.retries = 0
        """Failed attempts that were retried, over the loop's lifetime (a metric)."""
        self.client: redis.Redis | None = None
        """A Redis Cluster client whose slot map is read again before each retry."""

    def call(self, operation: Callable[[], T], on_retry: Callable[[Exception], None] | None = None) -> T:
        """``operation()``, retried on :data:`RETRYABLE` errors until ``timeout_s`` after the
        call began; then :class:`RedisUnavailable` (the last error as its cause)."""
        started = time.monotonic()
        deadline = started + self.timeout_s
        backoff = Backoff(self.first_delay_s, self.max_delay_s, jitter=True)
        attempts = 0
        say_at = started + self.say_after_s
        while True:
            attempts += 1
            try:
                return operation()
            except RedisUnavailable:
                raise  # an inner loop's deadline passed: it has said everything
            except redis.AuthenticationError as exc:
                raise RedisAuthRefused(
                    f"Redis {'at ' + self.where + ' ' if self.where else ''}refused the connection: {explain(exc)}"
                ) from exc
            except RETRYABLE as exc:
                if untrusted_certificate(exc):  # as a refused password: waiting does not fix it
                    raise RedisUnavailable(
                        f"Redis {'at ' + self.where + ' ' if self.where else ''}refused: {explain(exc)}"
                    ) from exc
                remaining = deadline - time.monotonic()
                if self._stopped():
                    raise
                if remaining <= 0:
                    raise RedisUnavailable(
                        f"Redis {'at ' + self.where + ' ' if self.where else ''}unavailable for "
                        f"{time.monotonic() - started:.0f} s, past the reconnect deadline of {self.timeout_s:g} s "
                        f"({attempts} attempt{'s' if attempts > 1 else ''}): {explain(exc)}"
                    ) from exc
                self.retries += 1
                if (now := time.monotonic()) >= say_at:
                    say_at = now + SAY_EVERY_S
                    log.warning(
                        "Redis %sis unavailable (%s): still trying, for up to %g s (%.0f s so far)",
                        f"at {self.where} " if self.where else "", explain(exc), self.timeout_s, now - started,
                    )  # fmt: skip
                refresh_routes(self.client)
                if on_retry is not None:
                    on_retry(exc)
                # Jittered: many workers reconnecting to a restarted Redis do not stampede.
                pause = min(remaining, backoff.next())
                if self.stop is None:
                    time.sleep(pause)
                elif self.stop.wait(pause):
                    raise

    def _stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

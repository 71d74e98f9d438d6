"""Opening Redis clients the same way everywhere: password from the environment, timeouts
that never hang, and which errors mean "Redis is away, try again".

    >>> client = connect("redis://127.0.0.1:6379/0")   # doctest: +SKIP
    >>> client.ping()                                    # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

PASSWORD_ENV = "ROLLOUTFLEET_REDIS_PASSWORD"

RETRYABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,  # a restarted server still loading its data set
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,  # a replica during failover
    ConnectionResetError,
)
"""Errors after which the same call may succeed later (Redis restarting, failing over)."""

T = TypeVar("T")


def connect(
    url: str,
    password: str | None = None,
    *,
    socket_timeout: float = 30.0,
    connect_timeout: float = 5.0,
) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``).

    The password is ``password`` or else ``$ROLLOUTFLEET_REDIS_PASSWORD``; it is never
    logged (redis-py masks it in the client's repr). ``socket_timeout`` must exceed the
    longest BLOCK plus the largest transfer: without one a dead server hangs the caller.
    """
    password = password if password is not None else os.environ.get(PASSWORD_ENV) or None
    return redis.Redis.from_url(
        url,
        password=password,
        socket_timeout=socket_timeout,
        socket_connect_timeout=connect_timeout,
        socket_keepalive=True,
        health_check_interval=30,
        # Retries are ours (RetryLoop), so a re-sent XADD is a decision we make and count.
        retry=Retry(NoBackoff(), 0),
    )


class RetryLoop:
    """Exponential backoff with jitter for calls that fail while Redis restarts.

    >>> loop = RetryLoop(timeout_s=30)
    >>> loop.call(lambda: 42)
    42

    ``stop``: once set, a failed attempt is re-raised at once instead of retried, and a
    backoff sleep in progress ends: a process told to stop must not spend its grace period
    waiting for a Redis that is gone.
    """

    def __init__(
        self,
        timeout_s: float,
        first_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.retries = 0
        """Failed attempts that were retried, over the loop's lifetime (a metric)."""

    def call(self, operation: Callable[[], T], on_retry: Callable[[Exception], None] | None = None) -> T:
        """``operation()``, retried on :data:`RETRYABLE` errors until ``timeout_s`` has passed."""
        deadline = time.monotonic() + self.timeout_s
        delay = self.first_delay_s
        while True:
            try:
                return operation()
            except RETRYABLE as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stopped():
                    raise
                self.retries += 1
                if on_retry is not None:
                    on_retry(exc)
                # Full jitter: many workers reconnecting to a restarted Redis do not stampede.
                pause = min(remaining, random.uniform(delay / 2, delay))
                if self.stop is None:
                    time.sleep(pause)
                elif self.stop.wait(pause):
                    raise
                delay = min(delay * 2, self.max_delay_s)

    def _stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

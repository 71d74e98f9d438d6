"""The retry loop's deadline and the one line it ends with (no server: operations that fail)."""

from __future__ import annotations

import time

import pytest
import redis

from rolloutfleet.transport.connection import RedisUnavailable, RetryLoop


def failing(error: Exception, calls: list[float]):  # type: ignore[no-untyped-def]
    def operation() -> None:
        calls.append(time.monotonic())
        raise error

    return operation


def test_past_the_deadline_one_line_naming_where_how_long_and_why() -> None:
    calls: list[float] = []
    loop = RetryLoop(0.3, first_delay_s=0.01, where="10.0.0.7:6379/0")
    with pytest.raises(RedisUnavailable) as failure:
        loop.call(failing(redis.ConnectionError("Error 111 connecting. Connection refused."), calls))
    message = str(failure.value)
    assert "\n" not in message
    assert "Redis at 10.0.0.7:6379/0 unavailable" in message and "deadline of 0.3 s" in message
    assert f"({len(calls)} attempts)" in message and "Connection refused" in message
    assert len(calls) > 2 and calls[-1] - calls[0] >= 0.25  # retried until the deadline, not given up at once
    assert isinstance(failure.value, redis.ConnectionError)


def test_a_full_redis_is_retried_and_explained() -> None:
    with pytest.raises(RedisUnavailable, match=r"refuses writes: out of memory \(maxmemory"):
        RetryLoop(0.05, first_delay_s=0.01).call(
            failing(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), [])
        )


def test_other_errors_are_not_retried() -> None:
    calls: list[float] = []
    with pytest.raises(redis.ResponseError):
        RetryLoop(5).call(failing(redis.ResponseError("WRONGTYPE"), calls))
    assert len(calls) == 1

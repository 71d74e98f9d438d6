"""The retry loop's deadline and the one line it ends with (no server: operations that fail)."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from rolloutfleet.transport.redis.connection import RedisUnavailable, RetryLoop


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


def test_a_call_that_keeps_failing_says_so_in_one_warning_long_before_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = RetryLoop(0.3, first_delay_s=0.01, where="10.0.0.7:6379/0", say_after_s=0.05)
    with caplog.at_level(logging.WARNING, logger="rolloutfleet.transport"), pytest.raises(RedisUnavailable):
        loop.call(failing(redis.ConnectionError("Error 111 connecting. Connection refused."), []))
    said = [record.getMessage() for record in caplog.records if record.name == "rolloutfleet.transport"]
    assert len(said) == 1, said  # repeated every 30 s, not at every retry
    assert said[0].startswith("Redis at 10.0.0.7:6379/0 is unavailable (") and "Connection refused" in said[0]
    assert "still trying, for up to 0.3 s" in said[0]


def test_a_blip_shorter_than_the_warning_delay_is_not_said(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[float] = []

    def flaky() -> int:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise redis.ConnectionError("Connection reset by peer")
        return 7

    with caplog.at_level(logging.WARNING, logger="rolloutfleet.transport"):
        assert RetryLoop(5, first_delay_s=0.01).call(flaky) == 7
    assert [r for r in caplog.records if r.name == "rolloutfleet.transport"] == []


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


def test_an_authentication_error_is_not_retried() -> None:
    calls: list[float] = []
    loop = RetryLoop(timeout_s=60)
    with pytest.raises(redis.AuthenticationError):
        loop.call(failing(redis.AuthenticationError("invalid username-password pair"), calls))
    assert len(calls) == 1 and loop.retries == 0


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (redis.ConnectionError("Error 111 connecting to h:1. Connection refused."), "connection refused"),
        (redis.ConnectionError("Error -2 connecting to nohost:6379. Name or service not known."), "host not found"),
        (redis.TimeoutError("Timeout connecting to server"), "no answer (timed out)"),
        (redis.AuthenticationError("Authentication required."), "a password is required"),
        (redis.AuthenticationError("invalid username-password pair"), "authentication failed"),
    ],
)
def test_failure_line_says_what_a_user_can_act_on(error: Exception, reason: str) -> None:
    from rolloutfleet.transport.redis.connection import failure_line

    line = failure_line(error, "h:1")
    assert line.startswith(f"redis at h:1: {reason}") and "\n" not in line


def test_urls_are_checked_and_shown_without_their_password() -> None:
    from rolloutfleet.transport.redis.connection import address, check_url

    for good in ("redis://h:1/0", "rediss://:pw@h", "unix:///run/redis.sock", "redis:///0"):
        check_url(good)
    for bad, why in [
        ("http://u:hunter2@h:6379/0", "must start with redis://"),
        ("h:6379", "must start with redis://"),
        ("redis://:hunter2@h:99999/0", "its port is not a number"),
        ("unix://", "names no socket path"),
        ("redis://:hunter2@h:6379/abc", "its path '/abc' is not a database number"),
    ]:
        with pytest.raises(ValueError, match=why) as caught:
            check_url(bad)
        assert "hunter2" not in str(caught.value)
    with pytest.raises(ValueError, match="'redis://h:99999/0' is not a Redis URL"):  # the port as written
        check_url("redis://h:99999/0")
    assert address("redis://:hunter2@10.0.0.7:6380/2") == "10.0.0.7:6380"

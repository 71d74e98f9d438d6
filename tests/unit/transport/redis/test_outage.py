"""The one outage loop (workers and evaluation workers) and the one backoff, without a server:
the errors are the Redis client's own classes, as a real server makes it raise them."""

from __future__ import annotations

import logging

import pytest
import redis

from rolloutfleet.transport.redis.outage import AWAY_BACKOFF, REFUSED_BACKOFF, OutageLoop
from rolloutfleet.transport.redis.retry import Backoff

URL = "redis://worker:s3cret-pass@10.0.0.7:6379/0"


class Recorder:
    def __init__(self) -> None:
        self.slept: list[float] = []
        self.reasons: list[str] = []
        self.counted = 0

    def outage(self, **kwargs: object) -> OutageLoop:
        def count() -> None:
            self.counted += 1

        return OutageLoop(URL, sleep=self.slept.append, unready=self.reasons.append, counted=count, **kwargs)  # type: ignore[arg-type]


def test_backoff_doubles_to_its_cap_and_starts_over_after_a_success() -> None:
    backoff = Backoff(0.5, 3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_jittered_backoff_stays_in_the_upper_half_of_each_pause() -> None:
    backoff = Backoff(1.0, 4.0, jitter=True)
    for bound in (1.0, 2.0, 4.0, 4.0):
        assert bound / 2 <= backoff.next() <= bound


@pytest.mark.parametrize(("first", "cap"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 1.0)])
def test_a_backoff_that_could_not_wait_is_refused(first: float, cap: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        Backoff(first, cap)


def test_redis_away_is_waited_out_with_backoff_unready_and_counted() -> None:
    seen = Recorder()
    outage = seen.outage()
    for _ in range(7):
        assert outage.failed(redis.ConnectionError("Connection refused")) is None
    assert seen.slept == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert seen.slept[-1] == AWAY_BACKOFF[1]
    assert seen.reasons == ["redis: Connection refused"] * 7
    assert seen.counted == 7
    outage.succeeded()
    outage.failed(redis.TimeoutError("Timeout reading from socket"))
    assert seen.slept[-1] == AWAY_BACKOFF[0]


def test_a_refused_password_is_the_line_to_end_with_never_the_password() -> None:
    seen = Recorder()
    line = seen.outage().failed(redis.AuthenticationError("invalid username-password pair"))
    assert line is not None and "10.0.0.7:6379" in line and "s3cret" not in line
    assert "password" in line  # what to check: the Secret
    assert seen.slept == [] and seen.counted == 0  # not waited for, and not an outage


def test_noperm_is_said_once_per_refusal_and_waited_for_up_to_its_own_cap(caplog: pytest.LogCaptureFixture) -> None:
    seen = Recorder()
    outage = seen.outage()
    refusal = redis.exceptions.NoPermissionError("this user has no permissions to run the 'xadd' command")
    with caplog.at_level(logging.ERROR):
        for _ in range(8):
            assert outage.failed(refusal) is None
    said = [r.getMessage() for r in caplog.records if "NOPERM" in r.getMessage()]
    assert len(said) == 1 and "10.0.0.7:6379" in said[0] and "s3cret" not in said[0]
    assert max(seen.slept) == REFUSED_BACKOFF[1] and seen.slept[0] == REFUSED_BACKOFF[0]
    assert seen.reasons[-1].startswith("redis: NOPERM")
    assert seen.counted == 8


def test_never_reached_past_the_start_up_bound_ends_with_one_line() -> None:
    seen = Recorder()
    outage = seen.outage(startup_bound_s=0.0)
    line = outage.failed(redis.ConnectionError("Connection refused"), starting=True)
    assert line is not None and "(tried for 0 s)" in line and "connection refused" in line
    # Once reached (not starting), the same outage is ridden out for ever.
    assert outage.failed(redis.ConnectionError("Connection refused")) is None


def test_a_stopping_process_is_not_made_to_wait() -> None:
    seen = Recorder()
    assert seen.outage().failed(redis.ConnectionError("gone"), wait=False) is None
    assert seen.slept == [] and seen.counted == 1 and seen.reasons == ["redis: gone"]


def test_an_error_that_is_no_outage_is_raised_again() -> None:
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        Recorder().outage().failed(redis.ResponseError("WRONGTYPE Operation against a key"))


def test_what_the_caller_retries_beyond_redis_being_away_is_met_the_same_way() -> None:
    seen = Recorder()
    outage = seen.outage(retryable=(redis.ConnectionError, redis.WatchError))
    assert redis.WatchError in outage.errors
    assert outage.failed(redis.WatchError("lost")) is None and seen.slept == [0.5]

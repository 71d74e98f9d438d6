"""The operator's token bucket: a burst at once, then ``rate`` calls a second."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet_operator.loop.ratelimit import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_calls_are_spaced_by_the_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=100.0, burst=10.0, clock=clock)
    assert [bucket.delay() for _ in range(10)] == [0.0] * 10
    # The 11th..13th calls wait for tokens not yet added: 10 ms apart at 100/s.
    assert [round(bucket.delay(), 4) for _ in range(3)] == [0.01, 0.02, 0.03]


def test_tokens_come_back_with_time_up_to_the_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=100.0, burst=10.0, clock=clock)
    for _ in range(10):
        bucket.delay()
    clock.now += 0.055  # 5.5 tokens back
    assert [bucket.delay() for _ in range(5)] == [0.0] * 5
    assert bucket.delay() == pytest.approx(0.005)  # half a token short
    clock.now += 3600  # a quiet hour refills to the burst, no more
    assert sum(1 for _ in range(20) if bucket.delay() == 0.0) == 10


def test_a_thousand_calls_take_as_long_as_the_rate_says() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=200.0, burst=50.0, clock=clock)
    waits = [bucket.delay() for _ in range(1000)]
    # All asked at once: the last waits for the 950 tokens beyond the burst.
    assert waits[-1] == pytest.approx(950 / 200.0)


@pytest.mark.asyncio
async def test_every_write_of_the_operator_takes_a_token(kube: Any) -> None:
    from rolloutfleet_operator.loop.api_calls import API_BURST, API_QPS, create_pod, patch_status

    api = kube.api()
    api.bucket = TokenBucket(API_QPS, API_BURST, clock=lambda: 5.0)  # time stands still: no refill
    pod = {"metadata": {"name": "cp-worker-0", "namespace": "team"}}
    await create_pod(api, pod)
    await patch_status(api, "team", "cp", {"phase": "Pending"})
    assert api.bucket.tokens == API_BURST - 2

"""The look a waiting get() takes at who holds the fleet back: when, and that it never fails the get()."""

from __future__ import annotations

import logging

import pytest

from rolloutfleet.transport.consuming.wait import SAY_AFTER_S, SAY_EVERY_S, StarvedWait
from rolloutfleet.transport.redis.stream_status import Hold

FULL = Hold("ppo", since=0.0, held_s=9.0, unconsumed=4, max_len=4, ignored=(), learner_idle_s=30.0)


def test_it_looks_after_a_few_seconds_then_every_half_minute_and_says_it_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    looks: list[float] = []
    wait = StarvedWait(lambda: looks.append(1.0) or FULL, "ppo", "s")
    wait.start(100.0)
    with caplog.at_level(logging.WARNING):
        for now in (100.0, 100.0 + SAY_AFTER_S - 0.1, 100.0 + SAY_AFTER_S, 101.0 + SAY_AFTER_S,
                    100.0 + SAY_AFTER_S + SAY_EVERY_S):  # fmt: skip
            wait.check(now, held_rows=6400, min_steps=10_000)
    assert len(looks) == 2 and wait.said == 2 and caplog.text.count("no more can come") == 2


def test_a_redis_that_cannot_be_asked_leaves_the_get_alone() -> None:
    def refused() -> Hold:
        raise ConnectionError("redis away")

    wait = StarvedWait(refused, "ppo", "s")
    wait.start(0.0)
    wait.check(SAY_AFTER_S, held_rows=1, min_steps=2)  # raises nothing
    assert wait.said == 0

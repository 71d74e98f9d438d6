"""``BatchConsumer.get``/``read`` at their edges, against a real redis-server: zero means a
read that does not wait and returns what is there; nonsense is a ValueError naming the
argument (before anything is read, so nothing is taken from the stream)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher

pytestmark = pytest.mark.integration


def batch(rows: int, value: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((rows, 2), value, np.float32)}


def test_min_steps_zero_returns_the_rows_waiting_without_waiting(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "zero")
    consumer = BatchConsumer(redis_url, "zero", block_s=30.0)  # a blocking read would take 30 s
    assert len(consumer.get(min_steps=0)) == 0  # nothing there: an empty batch, at once
    for value in range(3):
        publisher.publish(batch(4, value))
    got = consumer.get(min_steps=0)
    assert len(got) == 12 and sorted(set(got["obs"][:, 0].tolist())) == [0.0, 1.0, 2.0]


def test_timeout_zero_returns_what_is_there_or_none(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "zero")
    consumer = BatchConsumer(redis_url, "zero", block_s=30.0)
    assert consumer.get(min_steps=1, timeout=0) is None  # nothing there: None, at once
    publisher.publish(batch(5, 7))
    got = consumer.get(min_steps=5, timeout=0)
    assert got is not None and len(got) == 5
    publisher.publish(batch(5, 8))
    assert consumer.get(min_steps=8, timeout=0) is None  # 5 rows are not 8: kept for the next call
    publisher.publish(batch(5, 9))
    got = consumer.get(min_steps=8, timeout=0)
    assert got is not None and got["obs"][:, 0].tolist() == [8.0] * 5 + [9.0] * 5  # nothing lost
    publisher.publish(batch(2, 10))
    assert [len(m.batch) for m in consumer.read(timeout=0)] == [2]


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda c: c.get(min_steps=-1), "min_steps"),
        (lambda c: c.get(min_steps=2.5), "min_steps"),
        (lambda c: c.get(min_steps="10"), "min_steps"),
        (lambda c: c.get(min_steps=True), "min_steps"),
        (lambda c: c.get(timeout=-1), "timeout"),
        (lambda c: c.get(timeout=math.nan), "timeout"),
        (lambda c: c.get(timeout="5"), "timeout"),
        (lambda c: c.read(count=0), "count"),
        (lambda c: c.read(count=-3), "count"),
        (lambda c: c.read(timeout=-0.5), "timeout"),
    ],
)
def test_nonsense_is_a_value_error_naming_the_argument_and_takes_nothing(
    redis_url: str, call: object, argument: str
) -> None:
    BatchPublisher(redis_url, "zero").publish(batch(3, 1))
    consumer = BatchConsumer(redis_url, "zero", block_s=0.05)
    with pytest.raises(ValueError, match=rf"^{argument} must be "):
        call(consumer)  # type: ignore[operator]
    assert consumer.stats.delivered == 0
    assert len(consumer.get(min_steps=3, timeout=5)) == 3


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"read_count": 0}, "read_count"),
        ({"block_s": 0}, "block_s"),
        ({"block_s": math.inf}, "block_s"),
        ({"max_policy_lag": -1}, "max_policy_lag"),
        ({"reclaim_idle_s": math.nan}, "reclaim_idle_s"),
        ({"reconnect_timeout_s": -1}, "reconnect_timeout_s"),
    ],
)
def test_nonsense_settings_are_refused_naming_them(redis_url: str, kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument} must be "):
        BatchConsumer(redis_url, "zero", **kwargs)  # type: ignore[arg-type]

"""The autoscaler's signals against a real redis-server: a learner's get() that waits for
rows is counted as starved, one given rows at once is not; read_signals sees it, with the
workers' heartbeats, and says why when Redis is away."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.appetite import read_signals
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import write_heartbeat
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration
JOB = RolloutJob.from_dict({"metadata": {"name": "cartpole"}, "spec": {"env": {"id": "CartPole-v1"}}})


def batch(rows: int) -> dict[str, np.ndarray]:
    return {"obs": np.zeros((rows, 2), np.float32)}


def test_a_learner_waiting_on_an_empty_stream_is_starved_and_says_so(redis_url: str) -> None:
    consumer = BatchConsumer(redis_url, JOB, block_s=0.1, consumer="hungry")
    assert consumer.get(min_steps=1, timeout=0.6) is None  # nothing there: all of it waited for rows
    meter = consumer.appetite.meter
    assert meter.starved_s >= 0.5 and meter.rows == 0
    consumer.get(min_steps=1, timeout=0.1)  # a second call stamps again (twice a second at most)
    signals = read_signals(redis_url, JOB)
    assert signals.error is None
    [sample] = signals.learners
    assert sample.consumer == "learner/hungry" and sample.starved_s >= 0.5 and sample.rows == 0
    assert signals.last_read_age_s is not None and signals.last_read_age_s < 5


def test_a_learner_given_full_reads_is_not_starved_and_counts_its_rows(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, JOB)
    for _ in range(40):
        publisher.publish(batch(8))
    consumer = BatchConsumer(redis_url, JOB, block_s=0.1, read_count=4, consumer="fed")
    got = consumer.get(min_steps=32, timeout=5.0)
    assert got is not None and len(got) == 32
    assert consumer.appetite.meter.starved_s == 0.0  # every read came back with the 4 entries it asked for
    assert consumer.appetite.meter.rows == 32
    assert len(consumer.read(count=4, timeout=1.0)) == 4
    assert consumer.appetite.meter.rows == 64


def test_read_signals_carries_the_workers_blocked_time(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = job_keys("default", "cartpole")
    write_heartbeat(client, keys, 0, {"env_steps_per_s": 500.0, "backpressure_seconds": 3.25}, now=100.0)
    write_heartbeat(client, keys, 1, {"env_steps_per_s": 480.0}, now=100.0, waiting_since=90.0)
    signals = read_signals(redis_url, JOB)
    assert [(w.index, w.steps_per_s, w.blocked_s, w.waiting_for_learner) for w in signals.workers] == [
        (0, 500.0, 3.25, False),
        (1, 0.0, 0.0, True),
    ]
    assert signals.learners == () and signals.last_read_age_s is None


def test_an_unreachable_redis_is_an_error_in_words_not_an_exception(own_redis: RedisServer) -> None:
    url = own_redis.url
    own_redis.close()
    signals = read_signals(url, JOB, timeout_s=0.5)
    assert signals.error is not None and signals.error.startswith("redis unreachable")
    assert signals.learners == () and signals.workers == ()

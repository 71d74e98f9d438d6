"""A learner judges batches against the columns the job's workers declared, not against the
first batch it happened to read; with nothing declared, an odd first batch sets no precedent.

Defect reproduced first: a :class:`BatchConsumer` took the first batch ``get()`` returned as
the reference; an odd batch (another obs shape) that arrived alone first made every good
batch after it a dead letter, and ``get()`` returned nothing more.
"""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.declared_columns import read_declared
from rolloutfleet.transport.entries import schema_of
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import wait_until

pytestmark = pytest.mark.integration


def batch(rows: int, value: int, width: int = 2) -> dict[str, np.ndarray]:
    return {"obs": np.full((rows, width), value, np.float32), "value": np.full(rows, value, np.int64)}


def dead_letters(redis_url: str, consumer: BatchConsumer) -> list[str]:
    letters = redis.Redis.from_url(redis_url).xrange(consumer.keys.dead_letters)
    return [fields[b"dead_letter_reason"].decode() for _, fields in letters]


def test_an_odd_first_batch_read_alone_sets_no_precedent_when_nothing_is_declared(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "solo")
    consumer = BatchConsumer(redis_url, "solo", block_s=0.05, read_count=16)
    publisher.publish(batch(7, 99, width=3))  # the odd one, alone in the stream
    first = consumer.get(min_steps=1, timeout=10)
    assert first is not None and first["obs"].shape == (7, 3)  # all there was to judge by
    for value in range(4):
        publisher.publish(batch(500, value))
    result = consumer.get(min_steps=2000, timeout=10)
    assert result is not None and len(result) == 2000, dead_letters(redis_url, consumer)
    assert sorted(set(result["value"].tolist())) == [0, 1, 2, 3]
    assert consumer.stats.dead_lettered == 0 and dead_letters(redis_url, consumer) == []


def test_batches_are_judged_against_the_columns_the_workers_declared(redis_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Five odd batches first (a majority of the first read), then a real worker's: the odd
    ones are dead letters, every batch of the worker is delivered."""
    keys = job_keys("default", "w")  # start_worker's job
    odd = BatchPublisher(redis_url, "w", max_len=1000, backpressure="dropOldest")
    for value in range(5):
        odd.publish({"obs": np.full((6, 9), value, np.float64), "tag": np.zeros(6, np.int8)})
    client = redis.Redis.from_url(redis_url)
    spec = {"env": {"id": "CartPole-v1", "numEnvs": 2}, "sampling": {"rolloutFragmentLength": 50},
            "redis": {"maxLen": 1000, "backpressure": "dropOldest"}}  # fmt: skip
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(spec))
    try:
        wait_until(lambda: client.xlen(keys.batches) >= 8, 120, "the worker's first batches")
        consumer = BatchConsumer(redis_url, "w", block_s=0.05, read_count=5)
        result = consumer.get(min_steps=300, timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    declared = read_declared(client, keys)
    assert declared is not None and ("obs", "float32", (4,)) in declared  # CartPole's, from the worker
    assert result is not None and len(result) >= 300
    assert schema_of(result) == declared
    reasons = dead_letters(redis_url, consumer)
    assert len(reasons) == 5 and all("columns" in reason for reason in reasons), reasons
    assert consumer.stats.dead_lettered == 5

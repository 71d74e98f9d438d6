"""BatchPublisher against a real redis-server: fields, backpressure both ways, size limit,
and a Redis restart in the middle of publishing."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis

from rolloutfleet.data.codec import decode
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BackpressureTimeout, BatchPublisher, PayloadTooLarge
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration


def batch(rows: int = 8, value: float = 0.0) -> dict[str, np.ndarray]:
    return {"obs": np.full((rows, 4), value, np.float32), "actions": np.arange(rows)}


def test_publish_writes_payload_and_metadata(redis_url: str) -> None:
    with BatchPublisher(redis_url, "cartpole", compression="lz4") as publisher:
        entry_id = publisher.publish(batch(5, 1.5), weights_seq_no=7, worker_index=2)
    [(got_id, fields)] = redis.Redis.from_url(redis_url).xrange(job_keys("default", "cartpole").batches)
    assert got_id.decode() == entry_id
    assert fields[b"worker_index"] == b"2" and fields[b"weights_seq_no"] == b"7" and fields[b"env_steps"] == b"5"
    assert abs(float(fields[b"created_at"]) - time.time()) < 5
    assert fields[b"seq"] == b"0" and len(fields[b"producer"]) == 16
    np.testing.assert_array_equal(decode(fields[b"payload"])["obs"], np.full((5, 4), 1.5, np.float32))
    assert publisher.stats.published == 1 and publisher.stats.bytes == len(fields[b"payload"])
    assert fields[b"weights_seq_no_min"] == b"7"  # no column: every row has the version given


def test_the_weights_versions_written_are_those_of_the_rows(redis_url: str) -> None:
    with BatchPublisher(redis_url, "cartpole") as publisher:
        publisher.publish({**batch(4), "weights_seq_no": np.array([3, 7, 7, 3])})
        with pytest.raises(ValueError, match=r"'weights_seq_no' column holds versions 5\.\.5"):
            publisher.publish({**batch(1), "weights_seq_no": np.array([5])}, weights_seq_no=6)
    [(_, fields)] = redis.Redis.from_url(redis_url).xrange(job_keys("default", "cartpole").batches)
    assert (fields[b"weights_seq_no_min"], fields[b"weights_seq_no"]) == (b"3", b"7")
    assert decode(fields[b"payload"])["weights_seq_no"].tolist() == [3, 7, 7, 3]


def test_options_default_from_the_job_spec(redis_url: str) -> None:
    job = RolloutJob.from_dict({
        "metadata": {"name": "pong", "namespace": "team"},
        "spec": {"env": {"id": "CartPole-v1"}, "redis": {"maxLen": 7, "backpressure": "dropOldest", "compression": "zstd"}},
    })  # fmt: skip
    publisher = BatchPublisher(redis_url, job)
    assert (publisher.max_len, publisher.backpressure, publisher.compression) == (7, "dropOldest", "zstd")
    assert publisher.keys.batches == "rolloutfleet:{team/pong}:batches"


def test_block_times_out_when_nobody_consumes_and_counts_it(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole", max_len=3, backpressure="block", block_timeout_s=0.3)
    for _ in range(3):
        publisher.publish(batch())
    started = time.monotonic()
    with pytest.raises(BackpressureTimeout, match=r"3 unconsumed entries \(maxLen 3\)"):
        publisher.publish(batch())
    assert 0.25 < time.monotonic() - started < 2
    assert publisher.stats.block_timeouts == 1 and publisher.stats.blocked_seconds >= 0.3
    assert redis.Redis.from_url(redis_url).xlen(publisher.keys.batches) == 3


def test_a_wait_says_whether_a_learner_reads_the_full_stream(redis_url: str) -> None:
    """What a worker tells "waiting for a learner" (no group reads) from "a learner not keeping
    up" by: the once-a-second report during the wait, and the timeout's fields."""
    publisher = BatchPublisher(redis_url, "cartpole", max_len=2, backpressure="block", block_timeout_s=1.5)
    reports: list[tuple[str, str | None, int]] = []
    publisher.on_wait = lambda stream, load, waited_s: reports.append((stream, load.group, load.unconsumed))
    publisher.publish(batch())
    publisher.publish(batch())
    with pytest.raises(BackpressureTimeout) as absent:
        publisher.publish(batch())
    assert reports and reports[0] == (publisher.keys.batches, None, 2)
    assert (absent.value.learner_absent, absent.value.group, absent.value.stream) == (
        True,
        None,
        publisher.keys.batches,
    )
    assert absent.value.waited_s >= 1.5
    # A learner reads one entry and keeps it: its group now holds the fleet back.
    BatchConsumer(redis_url, "cartpole").read(count=1, timeout=5)
    reports.clear()
    with pytest.raises(BackpressureTimeout) as slow:
        publisher.publish(batch())
    assert reports and all(group == "learner" for _, group, _ in reports)
    assert (slow.value.learner_absent, slow.value.group) == (False, "learner")


def test_block_waits_until_the_learner_acks(redis_url: str) -> None:
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05)
    publisher = BatchPublisher(redis_url, "cartpole", max_len=2, backpressure="block", block_timeout_s=10)
    publisher.publish(batch())
    publisher.publish(batch())

    def learner() -> None:
        time.sleep(0.3)
        consumer.ack(consumer.read(count=1, timeout=5))

    thread = threading.Thread(target=learner)
    thread.start()
    started = time.monotonic()
    publisher.publish(batch())  # waits for the learner's ack
    waited = time.monotonic() - started
    thread.join()
    assert 0.2 < waited < 5
    assert publisher.stats.blocked == 1 and publisher.stats.blocked_seconds > 0.2
    # Delivered but un-acked entries still count as unconsumed: the stream is full again.
    assert publisher.unconsumed() == 2


def test_drop_oldest_trims_and_counts_only_unread_entries(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole", max_len=5, backpressure="dropOldest")
    for _ in range(300):
        publisher.publish(batch(1))
    length = redis.Redis.from_url(redis_url).xlen(publisher.keys.batches)
    assert 5 <= length < 300  # approximate trimming: whole nodes of entries
    assert publisher.stats.dropped == 300 - length  # no group existed: every trimmed entry was unread
    assert publisher.stats.blocked == 0

    consumer = BatchConsumer(redis_url, "cartpole", start="$")
    dropped_before = publisher.stats.dropped
    for _ in range(300):
        publisher.publish(batch(1))
        consumer.ack(consumer.read(count=10, timeout=1))  # a learner keeping up: nothing unread is dropped
    assert publisher.stats.dropped == dropped_before


def test_payload_above_the_limit_is_rejected_clearly(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole", max_payload_bytes=1000)
    with pytest.raises(
        PayloadTooLarge, match=r"above max_payload_bytes=1,000 for stream rolloutfleet:\{default/cartpole"
    ):
        publisher.publish(batch(100))
    assert redis.Redis.from_url(redis_url).exists(publisher.keys.batches) == 0


def test_publisher_carries_on_across_a_redis_restart(own_redis: RedisServer) -> None:
    publisher = BatchPublisher(own_redis.url, "cartpole", backpressure="dropOldest", max_len=10_000)
    for i in range(5):
        publisher.publish(batch(2, i))
    restart = threading.Thread(target=own_redis.restart, kwargs={"down_s": 0.5})
    restart.start()
    time.sleep(0.1)
    for i in range(5, 10):
        publisher.publish(batch(2, i))  # the first of these waits for the server to come back
    restart.join()
    assert publisher.stats.retries >= 1 and publisher.stats.published == 10
    # Persistence is off: what was written before the crash is gone, everything after it is there.
    entries = own_redis.client().xrange(publisher.keys.batches)
    values = [float(decode(fields[b"payload"])["obs"][0, 0]) for _, fields in entries]
    assert values == sorted(set(values)) and values[-1] == 9.0 and set(range(5, 10)) <= set(values)

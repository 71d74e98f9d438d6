"""The backpressure measurement's Redis side against a real redis-server: the stream's last
entry id (without the entry), and a learner that consumed everything."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import redis

from rolloutfleet.transport.backpressure import LAST_ID_SCRIPT, stream_id
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher

pytestmark = pytest.mark.integration


def test_the_last_id_script_answers_the_last_entry_id_or_nil(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.eval(LAST_ID_SCRIPT, 1, "s") is None  # no stream
    ids = [client.xadd("s", {"payload": b"x" * 100_000}) for _ in range(3)]
    assert client.eval(LAST_ID_SCRIPT, 1, "s") == ids[-1] == client.xrevrange("s", count=1)[0][0]
    client.xdel("s", ids[-1])
    assert client.eval(LAST_ID_SCRIPT, 1, "s") == ids[1]
    client.xdel("s", *ids[:2])
    assert client.eval(LAST_ID_SCRIPT, 1, "s") is None  # an empty stream


def test_a_learner_that_consumed_everything_leaves_the_whole_stream_free(redis_url: str) -> None:
    batch = {"obs": np.zeros((2048, 4), np.float32)}
    with (
        BatchPublisher(redis_url, "job", max_len=10) as publisher,
        BatchConsumer(redis_url, "job", group="g") as consumer,
    ):
        consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it is a learner's
        for _ in range(5):
            publisher.publish(batch)
        assert publisher.load().unconsumed == 5
        consumer.ack(consumer.read(count=5, timeout=1))
        load = publisher.load()
        last = redis.Redis.from_url(redis_url).xrevrange(publisher.keys.batches, count=1)[0][0].decode()
    assert (load.unconsumed, load.group) == (0, "g")
    assert publisher.meter.trim_before is not None
    assert stream_id(publisher.meter.trim_before) > stream_id(last)  # everything before it is consumed


def test_a_measurement_riding_an_xadd_takes_the_last_id_from_it_and_runs_no_script(redis_url: str) -> None:
    """The script copies the stream's last entry (a whole batch) into Lua: ~250 us of Redis's
    single thread a measurement. Behind an XADD, the XADD's id is the last id; Redis's own
    command counters say no script ran, and the riding measurements judged the stream as a
    lone one does."""
    batch = {"obs": np.zeros((2048, 4), np.float32)}
    admin = redis.Redis.from_url(redis_url)
    with (
        BatchPublisher(redis_url, "ride", max_len=4) as publisher,
        BatchConsumer(redis_url, "ride", group="g") as consumer,
    ):
        consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it is a learner's
        publisher.publish(batch)  # the first publish measures alone first (the stream's load is unknown)
        admin.config_resetstat()
        for _ in range(3):  # 1 unconsumed: the next publish goes bare, then two carry a measurement
            publisher.publish(batch)
        stats = admin.info("commandstats")
        assert stats["cmdstat_xadd"]["calls"] == 3
        assert stats["cmdstat_xinfo|groups"]["calls"] == 2  # the two riding measurements
        assert "cmdstat_eval" not in stats and "cmdstat_evalsha" not in stats
        assert publisher.meter.full  # 4 unconsumed of maxLen 4: the next publish waits
        assert (publisher.load().unconsumed, publisher.load().group) == (4, "g")


def test_a_publish_waiting_for_room_looks_up_the_last_id_about_once_a_second(redis_url: str) -> None:
    """Waiting, a publisher polls every few ms; the script (a whole entry copied into Lua)
    runs for the first look and then about once a second, as Redis's counters tell."""
    batch = {"obs": np.zeros((2048, 4), np.float32)}
    admin = redis.Redis.from_url(redis_url)
    with (
        BatchPublisher(redis_url, "wait", max_len=2, block_timeout_s=60) as publisher,
        BatchConsumer(redis_url, "wait", group="g") as consumer,
    ):
        consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it is a learner's
        publisher.publish(batch)
        publisher.publish(batch)  # 2 unconsumed of maxLen 2: the next publish waits
        admin.config_resetstat()
        learner = threading.Timer(2.5, lambda: consumer.ack(consumer.read(count=2, timeout=1)))
        learner.start()
        started = time.monotonic()
        publisher.publish(batch)
        waited = time.monotonic() - started
        learner.join()
        stats = admin.info("commandstats")
    looks = stats["cmdstat_xinfo|groups"]["calls"]
    scripts = stats.get("cmdstat_eval", {"calls": 0})["calls"]
    assert publisher.stats.blocked == 1 and looks > 20  # it did wait, polling
    assert 1 <= scripts <= waited + 1  # the first look, then at most one a second

"""The backpressure measurement's Redis side against a real redis-server: the stream's last
entry id (without the entry), a learner that consumed everything, and a learner's group
made at the end of a full stream."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.backpressure import LAST_ID_SCRIPT, REMEASURE_S, BackpressureTimeout
from rolloutfleet.transport.redis.stream_load import stream_id

pytestmark = pytest.mark.integration


BATCH = {"obs": np.zeros((2048, 4), np.float32)}


@contextlib.contextmanager
def full_stream(redis_url: str, job: str) -> Iterator[tuple[BatchPublisher, BatchConsumer]]:
    """A publisher (``maxLen`` 2) whose next publish waits for a learner group that reads."""
    with (
        BatchPublisher(redis_url, job, max_len=2, block_timeout_s=60) as publisher,
        BatchConsumer(redis_url, job, group="g") as consumer,
    ):
        consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it is a learner's
        publisher.publish(BATCH)
        publisher.publish(BATCH)  # 2 unconsumed of maxLen 2: the next publish waits
        yield publisher, consumer


def publish_while_a_learner_frees_room(
    redis_url: str, publisher: BatchPublisher, learn: Callable[[], object]
) -> tuple[float, dict[str, Any]]:
    """A publish into a full stream while ``learn`` frees room 2.5 s later: how long it
    waited, and Redis's command counters over the wait."""
    admin = redis.Redis.from_url(redis_url)
    admin.config_resetstat()
    learner = threading.Timer(2.5, learn)
    learner.start()
    started = time.monotonic()
    publisher.publish(BATCH)
    waited = time.monotonic() - started
    learner.join()
    return waited, admin.info("commandstats")


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


def test_a_publish_waiting_for_a_batch_consumer_blocks_on_its_room_signal(redis_url: str) -> None:
    """Waiting for a ``BatchConsumer``'s group, a publisher blocks on the room signal (XREAD)
    instead of polling the stream: a few measurements in all, not one every few ms, and the
    learner's ack wakes it at once (long before its re-measurement, REMEASURE_S)."""
    with full_stream(redis_url, "wait") as (publisher, consumer):
        waited, stats = publish_while_a_learner_frees_room(
            redis_url, publisher, lambda: consumer.ack(consumer.read(count=2, timeout=1))
        )
    looks = stats["cmdstat_xinfo|groups"]["calls"]
    scripts = stats.get("cmdstat_eval", {"calls": 0})["calls"]
    assert publisher.stats.blocked == 1 and publisher.meter.signalled
    assert stats["cmdstat_xread"]["calls"] >= 1 and looks <= 3, stats  # the first look, the one after the signal
    assert 1 <= scripts <= looks
    assert waited < REMEASURE_S  # woken by the ack's signal, not by the re-measurement


def test_a_publish_waiting_for_a_learner_of_its_own_code_polls_as_before(redis_url: str) -> None:
    """A learner reading with plain XREADGROUP/XACK sends no room signal: the wait for it
    polls every few ms (and looks up the last id about once a second), as Redis's counters tell."""
    own = redis.Redis.from_url(redis_url)
    with BatchPublisher(redis_url, "own", max_len=2, block_timeout_s=60) as publisher:
        own.xgroup_create(publisher.keys.batches, "own", id="0", mkstream=True)
        first = publisher.publish(BATCH)
        own.xreadgroup("own", "c", {publisher.keys.batches: ">"}, count=1)  # delivered: the group reads
        own.xack(publisher.keys.batches, "own", first)
        publisher.publish(BATCH)
        publisher.publish(BATCH)

        def learn() -> None:
            reply = own.xreadgroup("own", "c", {publisher.keys.batches: ">"}, count=2)
            own.xack(publisher.keys.batches, "own", *[entry_id for _, entries in reply for entry_id, _ in entries])

        waited, stats = publish_while_a_learner_frees_room(redis_url, publisher, learn)
    looks = stats["cmdstat_xinfo|groups"]["calls"]
    scripts = stats.get("cmdstat_eval", {"calls": 0})["calls"]
    assert publisher.stats.blocked == 1 and not publisher.meter.signalled
    assert "cmdstat_xread" not in stats and looks > 20  # it did wait, polling
    assert 1 <= scripts <= waited + 1  # the first look, then at most one a second


def test_many_short_waits_look_up_the_last_id_about_once_a_second_in_all(redis_url: str) -> None:
    """A learner that frees one entry at a time makes a waiting publisher wait many short
    times; the script runs about once a second over all of them, not once a wait."""
    admin = redis.Redis.from_url(redis_url)
    with full_stream(redis_url, "short") as (publisher, consumer):
        stop = threading.Event()

        def learn() -> None:
            while not stop.wait(0.02):
                consumer.ack(consumer.read(count=1, timeout=1))

        learner = threading.Thread(target=learn)
        learner.start()
        admin.config_resetstat()
        started = time.monotonic()
        for _ in range(40):
            publisher.publish(BATCH)
        elapsed = time.monotonic() - started
        stop.set()
        learner.join()
        stats = admin.info("commandstats")
    scripts = stats.get("cmdstat_eval", {"calls": 0})["calls"]
    assert publisher.stats.blocked >= 10  # many short waits
    assert scripts <= elapsed + 1  # not once a wait


def test_a_learner_that_starts_reading_at_the_end_of_a_full_stream_gets_the_next_entries(redis_url: str) -> None:
    """The fleet filled maxLen before any learner came; a learner with its own code makes its
    group at ``$`` and blocks in XREADGROUP. Redis lists no consumer for it until an entry is
    delivered, so the group looks unread: the publisher lets one entry in, which wakes it."""
    batch = {"obs": np.zeros((16, 4), np.float32)}
    learner = redis.Redis.from_url(redis_url)
    with BatchPublisher(redis_url, "late", max_len=5, block_timeout_s=10) as publisher:
        before = [publisher.publish(batch) for _ in range(5)]
        assert publisher.meter.full  # no learner yet: the whole stream counts
        learner.xgroup_create(publisher.keys.batches, "own", id="$")
        read: list[bytes] = []

        def read_and_ack() -> None:
            while len(read) < 20:
                reply = learner.xreadgroup("own", "c", {publisher.keys.batches: ">"}, count=4, block=10_000)
                ids = [entry_id for _, entries in reply or [] for entry_id, _ in entries]
                if not ids:
                    return
                learner.xack(publisher.keys.batches, "own", *ids)
                read.extend(ids)

        reader = threading.Thread(target=read_and_ack)
        reader.start()
        time.sleep(0.3)  # blocked in XREADGROUP
        started = time.monotonic()
        published = [publisher.publish(batch) for _ in range(20)]
        reader.join(15)
    assert publisher.stats.block_timeouts == 0 and time.monotonic() - started < 10
    assert [entry_id.decode() for entry_id in read] == published  # every entry after the group's start
    # The entries before the group's start, which no learner group reads, are trimmed.
    assert not set(before) & {entry_id.decode() for entry_id, _ in learner.xrange(publisher.keys.batches)}


def test_a_group_never_read_at_the_end_of_a_full_stream_lets_in_one_entry_a_producer(redis_url: str) -> None:
    """Nobody reads the group (a learner that made it and went away): after the entry that
    would have woken it, the fleet waits for a learner again; nothing is trimmed."""
    batch = {"obs": np.zeros((16, 4), np.float32)}
    admin = redis.Redis.from_url(redis_url)
    with BatchPublisher(redis_url, "gone", max_len=5, block_timeout_s=1.5) as publisher:
        for _ in range(5):
            publisher.publish(batch)
        first = admin.xrange(publisher.keys.batches, count=1)[0][0]
        admin.xgroup_create(publisher.keys.batches, "left", id="$")
        publisher.publish(batch)  # the entry for the waiting group
        with pytest.raises(BackpressureTimeout, match="is the learner running"):
            publisher.publish(batch)
    assert admin.xlen(publisher.keys.batches) == 6
    assert admin.xrange(publisher.keys.batches, count=1)[0][0] == first

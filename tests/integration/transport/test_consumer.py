"""BatchConsumer against a real redis-server: delivery, ack-after-use, reclaiming from a
killed consumer, dead letters, duplicates, staleness, lag, and a Redis restart."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis
import torch

from rolloutfleet.data.codec import encode
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration
WORKER_DIR = str(Path(__file__).resolve().parents[3] / "worker")


def batch(rows: int, value: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((rows, 2), value, np.float32), "value": np.full(rows, value, np.int64)}


def keys_of(job: str) -> str:
    return job_keys("default", job).batches


def values_of(messages: list) -> list[int]:  # type: ignore[type-arg]
    return [int(m.batch["value"][0]) for m in messages]


def test_iteration_yields_batches_with_metadata(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05)
    for i in range(3):
        publisher.publish(batch(4, i), weights_seq_no=10 + i, worker_index=i)
    got = []
    for message in consumer:
        got.append((int(message.batch["value"][0]), message.metadata.worker_index, message.metadata.weights_seq_no))
        assert message.metadata.env_steps == 4
        message.ack()
        if len(got) == 3:
            break
    assert got == [(0, 0, 10), (1, 1, 11), (2, 2, 12)]
    assert consumer.lag().pending == 0 and consumer.stats.acked == 3


def test_get_concatenates_and_acks_after_use(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05, read_count=3)
    for i in range(5):
        publisher.publish(batch(10, i), weights_seq_no=i)
    result = consumer.get(min_steps=25, timeout=5)
    assert len(result) == 30  # whole messages: at least min_steps rows
    assert result["obs"].flags.writeable and result["obs"].shape[1:] == (2,)
    np.testing.assert_array_equal(result["weights_seq_no"], result["value"])  # per-row, from the metadata
    assert consumer.lag().pending == len(result) // 10  # still in use: not acked yet
    rest = consumer.get(min_steps=1, timeout=5)  # "used": the previous batch is acked now
    assert consumer.lag().pending == len(rest) // 10
    consumer.commit()
    assert consumer.lag().pending == 0


def test_get_times_out_with_none_and_keeps_what_it_read(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05)
    publisher.publish(batch(10, 1))
    started = time.monotonic()
    assert consumer.get(min_steps=15, timeout=0.3) is None
    assert 0.25 < time.monotonic() - started < 2
    publisher.publish(batch(10, 2))
    result = consumer.get(min_steps=15, timeout=5)
    assert result["value"].tolist() == [1] * 10 + [2] * 10


def test_get_as_torch(redis_url: str) -> None:
    BatchPublisher(redis_url, "cartpole").publish(batch(3, 4))
    tensors = BatchConsumer(redis_url, "cartpole").get(min_steps=3, timeout=5, as_torch=True, device="cpu")
    assert tensors["obs"].dtype == torch.float32 and tensors["obs"].shape == (3, 2)
    assert tensors["value"].tolist() == [4, 4, 4]


DOOMED = """
import os, sys
from rolloutfleet.data.codec import encode
from rolloutfleet.transport.consumer import BatchConsumer
consumer = BatchConsumer(sys.argv[1], "cartpole", consumer="doomed", block_s=0.05)
got = consumer.read(count=3, timeout=10)
print(len(got), flush=True)
os._exit(1)  # dies mid-batch: read, never acked
"""


def test_entries_of_a_killed_consumer_are_reclaimed_by_another(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    for i in range(5):
        publisher.publish(batch(2, i))
    env = {**os.environ, "PYTHONPATH": WORKER_DIR}
    doomed = subprocess.run(
        [sys.executable, "-c", DOOMED, redis_url], env=env, capture_output=True, text=True, timeout=60
    )
    assert doomed.stdout.strip() == "3", doomed.stderr
    survivor = BatchConsumer(redis_url, "cartpole", consumer="survivor", reclaim_idle_s=0.2, block_s=0.05)
    seen: list[int] = []
    deadline = time.monotonic() + 10
    while len(seen) < 5 and time.monotonic() < deadline:
        messages = survivor.read(timeout=0.1)
        seen += values_of(messages)
        survivor.ack(messages)
    assert sorted(seen) == [0, 1, 2, 3, 4]
    assert survivor.stats.reclaimed == 3
    assert survivor.lag().pending == 0


def test_unacked_messages_in_hand_are_not_reclaimed_by_their_own_consumer(redis_url: str) -> None:
    BatchPublisher(redis_url, "cartpole").publish(batch(2, 1))
    consumer = BatchConsumer(redis_url, "cartpole", reclaim_idle_s=0.05, block_s=0.05)
    [held] = consumer.read(timeout=5)
    time.sleep(0.2)
    assert consumer.read(timeout=0.2) == []
    held.ack()


def test_poison_entries_go_to_the_dead_letter_stream_with_the_reason(redis_url: str) -> None:
    keys = job_keys("default", "cartpole")
    client = redis.Redis.from_url(redis_url)
    publisher = BatchPublisher(redis_url, "cartpole")
    publisher.publish(batch(2, 1))
    client.xadd(keys.batches, {"payload": b"RFLT garbage", "worker_index": 3, "weights_seq_no": 0,
                               "env_steps": 2, "created_at": 0})  # fmt: skip
    client.xadd(keys.batches, {"worker_index": "x"})
    publisher.publish(batch(2, 2))
    consumer = BatchConsumer(redis_url, "cartpole", reclaim_idle_s=0.05, max_deliveries=2, block_s=0.05)
    good: list[int] = []
    deadline = time.monotonic() + 10
    while (len(good) < 2 or consumer.stats.dead_lettered < 2) and time.monotonic() < deadline:
        messages = consumer.read(timeout=0.1)
        good += values_of(messages)
        consumer.ack(messages)
    assert good == [1, 2]
    assert consumer.stats.dead_lettered == 2 and consumer.stats.decode_failures == 4  # each tried twice
    letters = client.xrange(keys.dead_letters)
    reasons = [fields[b"dead_letter_reason"].decode() for _, fields in letters]
    assert any("shorter than" in r for r in reasons), reasons
    assert any("'payload'" in r or "not a number" in r for r in reasons), reasons
    assert letters[0][1][b"payload"] == b"RFLT garbage" and letters[0][1][b"dead_letter_deliveries"] == b"2"
    assert consumer.lag().pending == 0


def test_stale_batches_are_dropped_and_counted(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    for version in (1, 5, 8, 9):
        publisher.publish(batch(2, version), weights_seq_no=version)
    consumer = BatchConsumer(redis_url, "cartpole", max_policy_lag=2, block_s=0.05)
    consumer.policy_version = 10
    messages = consumer.read(count=10, timeout=5)
    assert values_of(messages) == [8, 9] and consumer.stats.stale == 2
    assert consumer.stats.stale_rows == 4  # the two rows of each of the two stale batches
    consumer.ack(messages)
    assert consumer.lag() == consumer.lag().__class__(0, 0, None, 2)


def mixed(values: list[int], versions: list[int]) -> dict[str, np.ndarray]:
    return {"value": np.array(values, np.int64), "weights_seq_no": np.array(versions, np.int64)}


def test_rows_too_old_are_cut_from_a_mixed_batch_the_rest_is_delivered(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    # Rows carried over from v3 beside rows of v7, as a fragment after a weights update has.
    publisher.publish(mixed([0, 1, 2, 3, 4, 5], [3, 7, 3, 7, 7, 3]))
    publisher.publish(mixed([10, 11], [3, 3]))  # nothing recent: dropped whole
    publisher.publish(mixed([20, 21, 22], [6, 7, 5]))  # all within the lag: delivered as it is
    consumer = BatchConsumer(redis_url, "cartpole", max_policy_lag=2, block_s=0.05)
    consumer.policy_version = 7  # rows of v5 and newer pass; v3 does not
    messages = consumer.read(count=10, timeout=5)
    assert [m.batch["value"].tolist() for m in messages] == [[1, 3, 4], [20, 21, 22]]
    assert [m.batch["weights_seq_no"].tolist() for m in messages] == [[7, 7, 7], [6, 7, 5]]
    # Metadata is what the publisher wrote: the whole batch's versions, before the cut.
    assert [(m.metadata.weights_seq_no_min, m.metadata.weights_seq_no) for m in messages] == [(3, 7), (5, 7)]
    assert consumer.stats.stale_rows == 3 + 2 and consumer.stats.stale == 1
    assert consumer.stats.delivered == 2
    assert consumer.lag().pending == 2  # the stale batch is acked; the cut one waits for its ack
    consumer.ack(messages)
    assert consumer.lag() == consumer.lag().__class__(0, 0, None, 7 - 5)


def test_a_version_column_that_cannot_be_judged_is_a_dead_letter_naming_it(redis_url: str) -> None:
    keys = job_keys("default", "cartpole")
    client = redis.Redis.from_url(redis_url)
    payload = encode({"value": np.arange(2), "weights_seq_no": np.array([7.0, 7.0])})  # not integers
    client.xadd(keys.batches, {"payload": payload, "worker_index": 0, "weights_seq_no": 7, "env_steps": 2,
                               "created_at": 0, "producer": "p", "seq": 0})  # fmt: skip
    consumer = BatchConsumer(redis_url, "cartpole", max_policy_lag=1, max_deliveries=1, block_s=0.05)
    consumer.policy_version = 7
    assert consumer.read(count=10, timeout=0.3) == []
    [(_, letter)] = client.xrange(keys.dead_letters)
    assert b"column 'weights_seq_no' must be one integer per row" in letter[b"dead_letter_reason"]
    assert consumer.stats.dead_lettered == 1 and consumer.stats.stale_rows == 0 and consumer.lag().pending == 0


def test_impossible_metadata_is_a_dead_letter_with_its_reason_and_the_rest_is_delivered(redis_url: str) -> None:
    """A producer that is not ours (or a broken one) writes counts no worker could: they are
    judged before a learner sees them, and go to the dead letters saying which field."""
    keys = job_keys("default", "cartpole")
    client = redis.Redis.from_url(redis_url)
    payload = encode({"value": np.arange(2)})
    base = {"payload": payload, "worker_index": 0, "weights_seq_no": 1, "env_steps": 2, "created_at": 0}
    client.xadd(keys.batches, {**base, "env_steps": -5})
    client.xadd(keys.batches, {**base, "weights_seq_no": 10**30})
    client.xadd(keys.batches, base)
    consumer = BatchConsumer(redis_url, "cartpole", max_deliveries=1, block_s=0.05)
    good = consumer.read(count=10, timeout=1)
    assert [m.metadata.env_steps for m in good] == [2]
    reasons = sorted(fields[b"dead_letter_reason"].decode() for _, fields in client.xrange(keys.dead_letters))
    assert len(reasons) == 2 and consumer.stats.dead_lettered == 2, reasons
    assert "field 'env_steps' must be within 0 and 2**63 - 1, got -5" in reasons[0]
    assert "field 'weights_seq_no' must be within 0 and 2**63 - 1" in reasons[1]


def test_a_publisher_refuses_what_a_learner_would_dead_letter(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    with pytest.raises(ValueError, match="env_steps must be within 0 and 2\\*\\*63 - 1, got -5"):
        publisher.publish(batch(2, 1), env_steps=-5)
    with pytest.raises(ValueError, match="weights_seq_no must be within 0"):
        publisher.publish({**batch(2, 1), "weights_seq_no": np.array([-1, 0])})
    assert redis.Redis.from_url(redis_url).xlen(keys_of("cartpole")) == 0


def test_get_returns_only_rows_within_the_lag(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    publisher.publish(mixed([0, 1, 2, 3], [3, 7, 7, 3]))
    publisher.publish(mixed([4, 5], [7, 3]))
    consumer = BatchConsumer(redis_url, "cartpole", max_policy_lag=0, block_s=0.05)
    consumer.policy_version = 7
    result = consumer.get(min_steps=3, timeout=5)
    assert result["value"].tolist() == [1, 2, 4] and result["weights_seq_no"].tolist() == [7, 7, 7]
    assert consumer.stats.stale_rows == 3 and consumer.stats.stale == 0
    assert consumer.lag().policy_lag == 0  # judged by the rows delivered, not the metadata's oldest


def test_a_re_sent_batch_is_delivered_once(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    publisher.publish(batch(2, 1))
    client = redis.Redis.from_url(redis_url)
    [(_, fields)] = client.xrange(publisher.keys.batches)
    client.xadd(publisher.keys.batches, fields)  # what a retry after a lost XADD reply leaves behind
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05)
    messages = consumer.read(count=10, timeout=5)
    assert values_of(messages) == [1] and consumer.stats.duplicates == 1
    consumer.ack(messages)
    assert consumer.lag().pending == 0


def test_lag_reports_pending_undelivered_and_age(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    consumer = BatchConsumer(redis_url, "cartpole", block_s=0.05)
    for i in range(4):
        publisher.publish(batch(1, i))
    held = consumer.read(count=1, timeout=5)
    time.sleep(0.1)
    lag = consumer.lag()
    assert (lag.pending, lag.undelivered) == (1, 3)
    assert lag.oldest_pending_age_s is not None and lag.oldest_pending_age_s >= 0.09
    consumer.ack(held)


def test_redis_restart_mid_stream_no_duplicates_among_acked(own_redis: RedisServer) -> None:
    url = own_redis.url
    stop = threading.Event()
    published: list[int] = []

    def produce() -> None:
        publisher = BatchPublisher(url, "cartpole", backpressure="dropOldest", max_len=100_000)
        i = 0
        while not stop.is_set():
            publisher.publish(batch(1, i))
            published.append(i)
            i += 1
            time.sleep(0.002)

    producer = threading.Thread(target=produce)
    producer.start()
    consumer = BatchConsumer(url, "cartpole", block_s=0.05, reclaim_idle_s=1.0)
    acked: list[int] = []
    deadline = time.monotonic() + 3
    restarted = False
    while time.monotonic() < deadline:
        messages = consumer.read(count=5, timeout=0.1)
        consumer.ack(messages)
        acked += values_of(messages)
        if not restarted and len(acked) > 20:
            own_redis.restart(down_s=0.3)  # a crash: stream and group are gone
            restarted = True
    stop.set()
    producer.join()
    assert restarted
    assert len(acked) == len(set(acked)), "an entry was acked twice"
    after = [v for v in acked if v > 25]
    assert len(after) > 20, "consumption did not resume after the restart"


def test_the_quickstart_learner_with_no_redis_says_so_within_seconds_and_never_shows_the_password() -> None:
    """The README's learner, verbatim up to its loop, run as a newcomer runs it (a plain script,
    no logging set up) with ROLLOUTFLEET_REDIS_URL naming a port nothing listens on: a WARNING
    naming the address comes within seconds, not silence for the 120 s it keeps trying."""
    import re
    import socket

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    snippet = next(block for block in re.findall(r"```python\n(.*?)```", readme, re.S) if "BatchConsumer(" in block)
    setup = snippet[: snippet.index("while True:")]
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "ROLLOUTFLEET_REDIS_URL": f"redis://:hunter2-secret@127.0.0.1:{port}/0",
        "PYTHONPATH": WORKER_DIR,
    }
    script = setup + "consumer.get(min_steps=4096, timeout=10.0)\n"
    learner = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert learner.stderr is not None
        started, line = time.monotonic(), ""
        while "still trying" not in line and time.monotonic() - started < 60:  # it takes ~2 s
            line = learner.stderr.readline()
            assert line or learner.poll() is None, "the learner ended without saying why"
    finally:
        learner.kill()
        learner.wait()
    assert f"127.0.0.1:{port}" in line and "Connection refused" in line and "up to 120 s" in line, line
    assert "hunter2" not in line

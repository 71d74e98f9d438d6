"""The data plane on a real Redis Cluster (3 masters + 3 replicas on loopback): a URL to
any node is recognized, a job's batch streams spread over the masters, the learner reads
every shard, weights / filters / heartbeats keep working, a master killed mid-run loses no
published batch, and bad input is one line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.data.filters import MeanStdFilter
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.filter_sync import FilterSync, read_filter
from rolloutfleet.transport.heartbeat import read_heartbeats, write_heartbeat
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.connection import RedisUnavailable, connect, is_cluster
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher, WeightSubscriber
from tests.integration.cli.cli_kit import run_cli
from tests.integration.redis_cluster import LocalCluster

pytestmark = pytest.mark.integration
JOB = RolloutJob.from_dict({"metadata": {"name": "spread"}, "spec": {"env": {"id": "CartPole-v1"}}})


def batch(rows: int, value: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((rows, 2), value, np.float32), "value": np.full(rows, value, np.int64)}


def drain(consumer: BatchConsumer, expected: int, timeout: float = 60.0) -> list[tuple[str, int]]:
    """(producer, seq) of every message read (and acked) until ``expected`` distinct ones."""
    seen: list[tuple[str, int]] = []
    deadline = time.monotonic() + timeout
    while len(set(seen)) < expected and time.monotonic() < deadline:
        messages = consumer.read(timeout=1.0)
        consumer.ack(messages)
        seen += [(m.metadata.producer, m.metadata.seq) for m in messages]
    return seen


def test_any_node_url_is_recognized_and_three_shards_sit_on_three_masters(
    cluster_url: str, redis_cluster: LocalCluster
) -> None:
    assert is_cluster(connect(redis_cluster.nodes[4].url))  # a replica's URL too
    publishers = [BatchPublisher(cluster_url, "spread", worker_index=i) for i in range(6)]
    assert {p.keys.shards for p in publishers} == {3}  # one per master by default
    assert [p.keys.shard_index for p in publishers] == [0, 1, 2, 0, 1, 2]  # worker index mod shards
    masters = {redis_cluster.master_of(p.keys.batches) for p in publishers}
    assert len(masters) == 3
    consumer = BatchConsumer(cluster_url, "spread", block_s=0.2)
    assert len(consumer.shards) == 3
    for round_ in range(5):
        for index, publisher in enumerate(publishers):
            publisher.publish(batch(4, round_ * 10 + index), worker_index=index)
    seen = drain(consumer, 30)
    assert len(seen) == len(set(seen)) == 30
    batch_ = consumer.get(min_steps=1, timeout=0.5)
    assert batch_ is None  # nothing left
    lag = consumer.lag()
    assert (lag.pending, lag.undelivered) == (0, 0)
    for publisher in publishers:
        client = redis_cluster.client(redis_cluster.master_of(publisher.keys.batches))
        assert client.xlen(publisher.keys.batches) == 10  # 2 workers x 5 batches per shard


def test_get_gathers_min_steps_across_shards(cluster_url: str) -> None:
    publishers = [BatchPublisher(cluster_url, "gather", worker_index=i) for i in range(3)]
    consumer = BatchConsumer(cluster_url, "gather", block_s=0.2)
    for index, publisher in enumerate(publishers):
        publisher.publish(batch(10, index), worker_index=index)
    result = consumer.get(min_steps=30, timeout=20)
    assert result is not None and sorted(set(result["value"].tolist())) == [0, 1, 2] and len(result) == 30


def test_a_dead_consumers_entries_are_reclaimed_on_every_shard(cluster_url: str) -> None:
    publishers = [BatchPublisher(cluster_url, "reclaim", worker_index=i) for i in range(3)]
    for index, publisher in enumerate(publishers):
        publisher.publish(batch(2, index), worker_index=index)
    dead = BatchConsumer(cluster_url, "reclaim", consumer="dead", block_s=0.2)
    taken = drain_unacked(dead, 3)
    assert sorted(m.shard for m in taken) == [0, 1, 2]
    survivor = BatchConsumer(cluster_url, "reclaim", consumer="survivor", block_s=0.2, reclaim_idle_s=0.05)
    time.sleep(0.1)
    seen = drain(survivor, 3)
    assert sorted(seen) == sorted((m.metadata.producer, m.metadata.seq) for m in taken)
    assert survivor.stats.reclaimed == 3


def drain_unacked(consumer: BatchConsumer, expected: int) -> list:  # type: ignore[type-arg]
    got: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        got += consumer.read(timeout=1.0)
    return got


def test_weights_filters_and_heartbeats_work_on_a_cluster(cluster_url: str) -> None:
    weights = WeightPublisher(cluster_url, "spread", chunk_bytes=64)  # several chunks: the Lua flip in one slot
    subscriber = WeightSubscriber(cluster_url, "spread")
    assert weights.publish({"w": np.arange(100, dtype=np.float32)}) == 1
    update = subscriber.poll()
    assert update is not None and update.seq_no == 1
    np.testing.assert_array_equal(update.weights["w"], np.arange(100, dtype=np.float32))
    client = connect(cluster_url)
    rng = np.random.default_rng(0)
    seen_a, seen_b = rng.normal(3.0, 1.0, (50, 2)), rng.normal(-2.0, 1.0, (70, 2))
    a, b = MeanStdFilter((2,)), MeanStdFilter((2,))
    a(seen_a)
    FilterSync(client, JOB_KEYS).push(a)
    b(seen_b)
    FilterSync(client, JOB_KEYS).push(b)  # WATCH/MULTI on the cluster
    learner = read_filter(cluster_url, JOB)
    assert learner is not None and learner.stats.count == 120
    np.testing.assert_allclose(learner.stats.mean, np.concatenate([seen_a, seen_b]).mean(axis=0))
    write_heartbeat(client, JOB_KEYS, 3, {"env_steps_per_s": 5.0})
    assert list(read_heartbeats(cluster_url, JOB)) == [3]


JOB_KEYS = job_keys("default", "spread")


def test_a_worker_on_a_cluster_hears_weights_announced_on_another_node(cluster_url: str) -> None:
    """The announcement is published by the Lua script on the version's master; the worker's
    subscription sits on the channel's node, and Redis Cluster carries it between them."""
    config = WorkerConfig(job=JOB, worker_index=0, num_workers=1, redis_url=cluster_url)
    transport = WorkerTransport(config)
    deadline = time.monotonic() + 10
    while not (transport.poll_weights() == {} and transport.news.listening):
        assert time.monotonic() < deadline, "the subscription was not confirmed"
    assert WeightPublisher(cluster_url, "spread").publish({"w": np.ones(3, np.float32)}) == 1
    while "default" not in (updates := transport.poll_weights()):
        assert time.monotonic() < deadline, "the announcement did not arrive"
        time.sleep(0.01)
    assert updates["default"].seq_no == 1 and transport.news.announcements == 1
    transport.close()


def test_explicit_shards_are_followed_by_the_learner(cluster_url: str) -> None:
    job = RolloutJob.from_dict(
        {"metadata": {"name": "five"}, "spec": {"env": {"id": "CartPole-v1"}, "redis": {"shards": 5}}}
    )
    publishers = [BatchPublisher(cluster_url, job, worker_index=i) for i in range(5)]
    consumer = BatchConsumer(cluster_url, "five", block_s=0.2)  # not told: reads what the workers recorded
    assert len(consumer.shards) == 5
    for index, publisher in enumerate(publishers):
        publisher.publish(batch(1, index), worker_index=index)
    assert len(set(drain(consumer, 5))) == 5


def test_a_wrong_password_is_one_line_and_the_right_one_works() -> None:
    with LocalCluster(password="s3cret") as cluster:
        with pytest.raises(RedisUnavailable, match="authentication refused") as raised:
            BatchConsumer(cluster.url, "spread", password="wrong", reconnect_timeout_s=30)
        assert "\n" not in str(raised.value) and "s3cret" not in str(raised.value)
        publisher = BatchPublisher(cluster.url, "spread", password="s3cret", worker_index=1)
        consumer = BatchConsumer(cluster.url, "spread", password="s3cret", block_s=0.2)
        publisher.publish(batch(1, 7), worker_index=1)
        assert len(drain(consumer, 1)) == 1


def test_a_cluster_with_a_failed_slot_says_so(redis_cluster: LocalCluster) -> None:
    node = redis_cluster.client(0)
    slot = int(node.execute_command("CLUSTER KEYSLOT", "x"))
    owner = redis_cluster.master_of("x")
    redis_cluster.client(owner).execute_command("CLUSTER DELSLOTS", slot)
    try:
        owner_url = redis_cluster.nodes[owner].url
        with pytest.raises(redis.exceptions.ClusterDownError, match="cluster_state:fail"):
            connect(owner_url)
        with pytest.raises(RedisUnavailable, match="cluster_state:fail") as raised:
            BatchConsumer(owner_url, "spread", reconnect_timeout_s=0.5)
        assert "\n" not in str(raised.value)
    finally:
        redis_cluster.client(owner).execute_command("CLUSTER ADDSLOTS", slot)
        redis_cluster.wait_ok()


def test_a_master_killed_mid_run_loses_no_published_batch(own_cluster: LocalCluster) -> None:
    """Three publishers (one per shard) and a learner; the master of shard 1 is SIGKILLed
    while they run. Every batch a publisher got an entry id for (and a replica's WAIT) is
    read exactly once after de-duplication; re-deliveries are counted, not lost."""
    url = own_cluster.url
    publishers = [BatchPublisher(url, "failover", worker_index=i, reconnect_timeout_s=60) for i in range(3)]
    consumer = BatchConsumer(url, "failover", block_s=0.2, reclaim_idle_s=1.0, reconnect_timeout_s=15)
    victim = own_cluster.master_of(publishers[1].keys.batches)
    assert victim != 0  # the URL's node stays up (the clients know the others anyway)
    published: list[tuple[str, int]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce(index: int) -> None:
        publisher = publishers[index]
        value = 0
        try:
            while not stop.is_set() or value < 40:
                publisher.publish(batch(2, value), worker_index=index)
                published.append((publisher.producer_id, value))
                value += 1
                if value >= 300:
                    break
                time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    seen = drain(consumer, 30)
    own_cluster.kill(victim)
    seen += drain(consumer, 60)
    stop.set()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    own_cluster.wait_ok()
    seen += drain(consumer, len(set(published)) - len(set(seen)))
    assert set(seen) == set(published)  # nothing published is lost
    assert len(seen) - len(set(seen)) == 0  # copies dropped by the consumer, never delivered twice
    assert sum(p.stats.unreplicated for p in publishers) == 0
    assert publishers[1].stats.retries > 0  # its master was killed under it
    assert len(published) > 120  # publishing went on after the kill (40 each before, 60 read after)


def test_streams_and_consume_show_and_read_every_shard(
    cluster_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells to the terminal width
    publishers = [BatchPublisher(cluster_url, "cli", worker_index=i) for i in range(3)]
    for index, publisher in enumerate(publishers):
        publisher.publish(batch(index + 1, index), worker_index=index)
    assert run_cli("streams", "--redis", cluster_url) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "default/cli" in line]
    assert [("shard 0/3" in row, "shard 1/3" in row, "shard 2/3" in row) for row in rows] == [
        (True, False, False), (False, True, False), (False, False, True)
    ]  # fmt: skip
    assert [row.split("│")[2].strip() for row in rows] == ["1", "1", "1"]  # length: one batch each
    looked = tmp_path / "look.npz"
    assert run_cli("consume", "--redis", cluster_url, "--job", "cli", "--count", "3", "--output", str(looked)) == 0
    with np.load(looked, allow_pickle=False) as data:
        assert sorted(data["worker_index"].tolist()) == [0, 1, 1, 2, 2, 2]
    taken = tmp_path / "taken.npz"
    assert run_cli("consume", "--redis", cluster_url, "--job", "cli", "--count", "3", "--output", str(taken),
                   "--group", "learner") == 0  # fmt: skip
    with np.load(taken, allow_pickle=False) as data:
        assert sorted(data["value"].tolist()) == [0, 1, 1, 2, 2, 2]

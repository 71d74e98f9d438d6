"""The local fleet (real worker processes) against a real Redis Cluster, given one node's URL."""

from __future__ import annotations

import time
from pathlib import Path

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import read_until, small_job
from tests.integration.redis_cluster import LocalCluster


def test_a_fleet_on_a_cluster_spreads_over_the_masters_and_the_learner_reads_them_all(
    cluster_url: str, redis_cluster: LocalCluster
) -> None:
    job = small_job("spread", replicas=3)
    consumer = BatchConsumer(cluster_url, job.name, group="test", block_s=0.2)
    with LocalFleet(job, redis_url=cluster_url) as fleet:
        seen = read_until(consumer, lambda ms: {m.metadata.worker_index for m in ms} == {0, 1, 2}, timeout=120)
        fleet.poll()
        assert fleet.restarts == 0
    # Worker i on shard i % 3, each shard on its own master.
    assert {(m.metadata.worker_index, m.shard) for m in seen} <= {(0, 0), (1, 1), (2, 2)}
    assert len({redis_cluster.master_of(shard.keys.batches) for shard in consumer.shards}) == 3
    rows = {m.metadata.worker_index: len(m.batch) for m in seen}
    assert set(rows.values()) == {100}  # 2 envs x 50 steps, whole fragments from every worker


def test_a_worker_given_a_wrong_cluster_password_exits_with_one_line(tmp_path: Path) -> None:
    # A password does not become right by waiting: the worker says so in one line (also its
    # termination message, so the job's status shows it) and exits 4; the restart budget
    # decides the rest, as for a plain Redis.
    with LocalCluster(password="s3cret") as cluster:
        worker = start_worker(cluster.url, free_port(), tmp_path, ROLLOUTFLEET_REDIS_PASSWORD="given-9f3e")
        try:
            _, stderr = worker.communicate(timeout=90)
        finally:
            worker.kill()
    assert worker.returncode == 4, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and "authentication failed" in lines[0], stderr
    assert "s3cret" not in stderr and "given-9f3e" not in stderr
    assert "Traceback" not in stderr
    assert "authentication failed" in (tmp_path / "termination").read_text()


def test_a_fleet_and_a_learner_lose_no_batch_when_a_master_is_killed(own_cluster: LocalCluster) -> None:
    """3 worker processes (``block``) and a learner; the master of shard 1 is SIGKILLed
    mid-run and its replica takes over. After the fleet stopped (each worker publishes its
    last fragment), every producer's batches are read with no seq missing and none twice:
    nothing a worker published was lost, and no worker restarted."""
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "failover"},
            "spec": {
                "replicas": 3,
                "env": {"id": "CartPole-v1", "numEnvs": 2},
                "sampling": {"rolloutFragmentLength": 50, "seed": 0},
                "redis": {"maxLen": 50, "backpressure": "block"},
            },
        }
    )
    consumer = BatchConsumer(own_cluster.url, job.name, block_s=0.2, reclaim_idle_s=2.0)
    victim = own_cluster.master_of(consumer.shards[1].keys.batches)
    with LocalFleet(job, redis_url=own_cluster.url) as fleet:
        seen = read_until(consumer, lambda ms: len(ms) >= 30 and len({m.shard for m in ms}) == 3, timeout=120)
        own_cluster.kill(victim)
        killed_at = time.time()
        # Published on shard 1 after its master died: the worker found the new master.
        seen += read_until(
            consumer, lambda ms: sum(m.shard == 1 and m.metadata.created_at > killed_at for m in ms) >= 5, timeout=120
        )
        fleet.poll()
        assert fleet.restarts == 0
        codes = fleet.stop()
    assert set(codes.values()) == {0}
    seen += read_until_quiet(consumer)
    by_producer: dict[str, list[int]] = {}
    for message in seen:
        by_producer.setdefault(message.metadata.producer, []).append(message.metadata.seq)
    assert len(by_producer) == 3  # one producer per worker: none was replaced
    for seqs in by_producer.values():
        assert sorted(seqs) == list(range(len(seqs)))  # none lost, none delivered twice


def read_until_quiet(consumer: BatchConsumer) -> list[Message]:
    """What is left, read and acked until a read finds nothing (the fleet has stopped)."""
    seen: list[Message] = []
    while messages := consumer.read(timeout=3.0):
        consumer.ack(messages)
        seen += messages
    return seen

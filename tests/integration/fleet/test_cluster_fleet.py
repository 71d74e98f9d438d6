"""The local fleet (real worker processes) against a real Redis Cluster, given one node's URL."""

from __future__ import annotations

import signal
from pathlib import Path

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.fleet.test_worker import probe, start_worker, wait_probe
from tests.integration.fleet_helpers import read_until, small_job, wait_until
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


def test_a_worker_given_a_wrong_cluster_password_waits_not_ready_and_says_why(tmp_path: Path) -> None:
    with LocalCluster(password="s3cret") as cluster:
        port = free_port()
        stderr = (tmp_path / "stderr").open("w+")
        worker = start_worker(cluster.url, port, tmp_path, stderr=stderr, ROLLOUTFLEET_REDIS_PASSWORD="wrong")
        try:
            wait_probe(port, "/readyz", 503, 60)
            wait_until(lambda: "authentication refused" in (tmp_path / "stderr").read_text(), 60, "the reason logged")
            assert worker.poll() is None and probe(port, "/healthz") == 200  # alive: no crash loop
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
            assert "s3cret" not in (tmp_path / "stderr").read_text()
        finally:
            worker.kill()

"""Per-job users on a real Redis Cluster (3 masters, 3 replicas): the operator's admin call
puts them on every node, replicas included (ACLs are per node, never replicated); a worker
publishes to its job's sharded streams as its user and the learner consumes them, nothing
refused on any node; after a master dies the users are applied again on the nodes left."""

from __future__ import annotations

import urllib.parse

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.redis.acl import job_users, password_hash
from rolloutfleet_operator.redis.admin import Admin, apply_users
from tests.integration.redis_cluster import LocalCluster

pytestmark = pytest.mark.integration

ADMIN, PASSWORD = "admin/#?@%", "user/#?@%"


def login(cluster: LocalCluster, user: str) -> str:
    quoted = urllib.parse.quote(user, safe=""), urllib.parse.quote(PASSWORD, safe="")
    return f"redis://{quoted[0]}:{quoted[1]}@127.0.0.1:{cluster.nodes[0].port}/0"


def test_users_on_every_node_of_a_cluster_and_again_after_a_failover() -> None:
    with LocalCluster(masters=3, replicas=1, password=ADMIN) as cluster:
        users = job_users("team-a", "spread")
        admin = Admin(cluster.url, None, ADMIN)
        wanted = [(users.worker, [password_hash(PASSWORD)]), (users.learner, [password_hash(PASSWORD)])]
        assert apply_users(admin, wanted) == 6
        for index in range(6):
            assert cluster.client(index).acl_getuser(users.worker.name)["passwords"] == [password_hash(PASSWORD)]
        job = RolloutJob.from_dict({"metadata": {"name": "spread", "namespace": "team-a"},
                                    "spec": {"replicas": 3, "env": {"id": "CartPole-v1"}}})  # fmt: skip
        for index in range(3):  # one worker per shard (one shard per master)
            config = WorkerConfig(job=job, worker_index=index, num_workers=3,
                                  redis_url=login(cluster, users.worker.name))  # fmt: skip
            transport = WorkerTransport(config)
            transport.publish(SampleBatch({"obs": np.zeros((2, 4), np.float32)}))
            transport.close()
        consumer = BatchConsumer(login(cluster, users.learner.name), "spread", "team-a")
        seen: list[int] = []
        for _ in range(20):
            for message in consumer.read(count=8, timeout=1):
                seen.append(message.metadata.worker_index)
                message.ack()
            if len(seen) == 3:
                break
        assert sorted(seen) == [0, 1, 2]
        consumer.close()
        for index in range(6):
            assert cluster.client(index).acl_log() == [], index
        master = cluster.master_of("rolloutfleet:{team-a/spread}:weights:version")
        cluster.kill(master)
        cluster.wait_ok()
        assert apply_users(admin, wanted) == 5  # the dead node is flagged fail and skipped

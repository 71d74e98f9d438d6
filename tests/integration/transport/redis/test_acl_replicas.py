"""Per-job users on a Redis with read replicas (``spec.redis.readReplicas``): ACLs are not
replicated, so the operator's admin call sets them on the primary and on each replica; a
worker logged in as its job's user then hears the announcement and downloads the learner's
version from its replica, nothing refused there; a replica the call cannot reach is named
in the one-line error."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Iterator

import numpy as np
import pytest
import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.acl import job_users, password_hash
from rolloutfleet.transport.redis.client_options import PASSWORD_ENV, USERNAME_ENV
from rolloutfleet.transport.weights import WeightPublisher
from rolloutfleet_operator.redis.admin import Admin, AdminError, apply_users
from tests.integration.redis_server import redis_server_binary

pytestmark = pytest.mark.integration

ADMIN, PASSWORD = "admin-pw", "user/#?@%"


def login(server: EmbeddedRedis, user: str) -> str:
    quoted = urllib.parse.quote(user, safe=""), urllib.parse.quote(PASSWORD, safe="")
    return f"redis://{quoted[0]}:{quoted[1]}@127.0.0.1:{server.port}/0"


def admin_client(server: EmbeddedRedis) -> redis.Redis:
    return redis.Redis(port=server.port, password=ADMIN)


@pytest.fixture
def primary_and_replica() -> Iterator[tuple[EmbeddedRedis, EmbeddedRedis]]:
    redis_server_binary()  # fails under CI where it is missing
    primary = EmbeddedRedis(extra_args=("--requirepass", ADMIN)).start()
    follows = ("--replicaof", "127.0.0.1", str(primary.port), "--masterauth", ADMIN, "--requirepass", ADMIN)
    replica = EmbeddedRedis(extra_args=follows).start()
    deadline = time.monotonic() + 10
    while admin_client(replica).info("replication")["master_link_status"] != "up":
        assert time.monotonic() < deadline, "the replica never linked"
        time.sleep(0.05)
    yield primary, replica
    replica.stop()
    primary.stop()


def test_the_jobs_users_on_the_primary_and_its_replica_and_a_worker_reads_weights_there(
    primary_and_replica: tuple[EmbeddedRedis, EmbeddedRedis], monkeypatch: pytest.MonkeyPatch
) -> None:
    primary, replica = primary_and_replica
    users = job_users("team-a", "replicated")
    admin = Admin(primary.url, None, ADMIN, replicas=(replica.url,))
    wanted = [(users.worker, [password_hash(PASSWORD)]), (users.learner, [password_hash(PASSWORD)])]
    assert apply_users(admin, wanted) == 2
    for server in (primary, replica):
        assert admin_client(server).acl_getuser(users.worker.name)["passwords"] == [password_hash(PASSWORD)]
    job = RolloutJob.from_dict({"metadata": {"name": "replicated", "namespace": "team-a"}, "spec": {
        "replicas": 1, "env": {"id": "CartPole-v1"},
        "redis": {"url": primary.url, "readReplicas": [replica.url]}}})  # fmt: skip
    # As in a pod: the job's worker user and password from the environment (its Secret), for
    # the primary and its replica alike.
    monkeypatch.setenv(USERNAME_ENV, users.worker.name)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    transport = WorkerTransport(WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=primary.url))
    deadline = time.monotonic() + 10
    while not transport.news.listening:
        assert time.monotonic() < deadline, transport.news.refused
        transport.poll_weights()
        time.sleep(0.02)
    WeightPublisher(login(primary, users.learner.name), job).publish({"w": np.arange(4, dtype=np.float32)})
    deadline = time.monotonic() + 10
    while (update := transport.poll_weights().get("default")) is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    np.testing.assert_array_equal(update.weights["w"], np.arange(4, dtype=np.float32))
    assert transport.weights.replica_failures == 0
    assert admin_client(replica).acl_log() == [] and admin_client(primary).acl_log() == []
    transport.close()


def test_a_replica_the_admin_call_cannot_reach_is_named(
    primary_and_replica: tuple[EmbeddedRedis, EmbeddedRedis],
) -> None:
    primary, replica = primary_and_replica
    port = replica.port
    replica.stop()
    admin = Admin(primary.url, None, ADMIN, replicas=(f"redis://127.0.0.1:{port}/0",))
    with pytest.raises(AdminError, match=f"redis at 127.0.0.1:{port} .*(refused|Error)") as caught:
        apply_users(admin, [(job_users("team-a", "x").worker, [password_hash(PASSWORD)])])
    assert ADMIN not in str(caught.value)

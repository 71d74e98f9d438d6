"""Weights from read replicas (``spec.redis.readReplicas``) on real redis-servers, one
``replicaof`` the other: a worker hears the announcement on its replica and downloads the
version there, so the primary serves none of it (Redis's own ``INFO commandstats`` and
byte counters say so); a replica that goes away sends the worker to the primary until it
is back; a replica behind what a worker holds is not taken for a Redis that lost its state."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import redis

from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.clients import worker_connections
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.integration

MODEL = {"w": np.arange(250_000, dtype=np.float32)}  # 1 MB a version


def job(primary: str, replicas: list[str]) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "cartpole", "namespace": "team"}, "spec": {
        "replicas": 2, "env": {"id": "CartPole-v1"}, "redis": {"url": primary, "readReplicas": replicas}}})  # fmt: skip


def until(condition: Callable[[], Any], timeout_s: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)
    return value


def stats(client: redis.Redis) -> tuple[int, int]:
    """(GETs run, bytes sent to clients) since the last CONFIG RESETSTAT: the server's own counts."""
    gets = int(client.info("commandstats").get("cmdstat_get", {}).get("calls", 0))
    return gets, int(client.info("stats")["total_net_output_bytes"])


@pytest.fixture
def replica(own_redis: RedisServer) -> Iterator[RedisServer]:
    server = RedisServer(executable=redis_server_binary())
    server.start()
    server.client().replicaof("127.0.0.1", own_redis.port)
    until(lambda: server.client().info("replication")["master_link_status"] == "up")
    yield server
    server.close()


def test_a_worker_downloads_each_version_from_its_replica_not_the_primary(
    own_redis: RedisServer, replica: RedisServer
) -> None:
    spec = job(own_redis.url, [replica.url])
    assert worker_connections(spec) == 1  # on the primary: the publisher's only
    transport = WorkerTransport(WorkerConfig(job=spec, worker_index=0, num_workers=2, redis_url=own_redis.url))
    primary = own_redis.client()
    until(lambda: transport.poll_weights() == {} and transport.news.listening)
    publisher = WeightPublisher(own_redis.url, spec)
    for version in (1, 2, 3):
        model = {"w": MODEL["w"] + version}
        assert publisher.publish(model) == version
        primary.config_resetstat()  # the publisher's own reads not counted
        replica.client().config_resetstat()
        update = until(lambda: transport.poll_weights().get("default"))  # announced on the replica
        assert update.seq_no == version
        np.testing.assert_array_equal(update.weights["w"], model["w"])
        primary_gets, primary_bytes = stats(primary)
        replica_gets, replica_bytes = stats(replica.client())
        assert primary_gets == 0 and replica_gets == 2  # the version key, then its one chunk
        assert replica_bytes > 1_000_000 > 100_000 > primary_bytes  # the megabyte left the replica only
    assert transport.weights.replica_failures == 0 and transport.weights.resets == 0
    transport.close()


def test_a_replica_away_sends_the_worker_to_the_primary_until_it_is_back(
    own_redis: RedisServer, replica: RedisServer
) -> None:
    spec = job(own_redis.url, [replica.url])
    transport = WorkerTransport(WorkerConfig(job=spec, worker_index=0, num_workers=1, redis_url=own_redis.url))
    publisher = WeightPublisher(own_redis.url, spec)
    publisher.publish(MODEL)
    assert until(lambda: transport.poll_weights().get("default")).seq_no == 1
    replica.stop()  # the replica's pod gone
    publisher.publish({"w": MODEL["w"] * 2})
    update = until(lambda: transport.poll_weights().get("default"))
    assert update.seq_no == 2 and transport.weights.replica_failures >= 1
    np.testing.assert_array_equal(update.weights["w"], MODEL["w"] * 2)
    transport.close()


def test_a_replica_behind_what_the_worker_holds_is_no_reset(own_redis: RedisServer, replica: RedisServer) -> None:
    spec = job(own_redis.url, [replica.url])
    transport = WorkerTransport(WorkerConfig(job=spec, worker_index=0, num_workers=1, redis_url=own_redis.url))
    publisher = WeightPublisher(own_redis.url, spec)
    publisher.publish(MODEL)
    assert until(lambda: transport.poll_weights().get("default")).seq_no == 1
    replica.client().replicaof("no", "one")  # cut off: it keeps version 1
    publisher.publish({"w": MODEL["w"] * 3})
    subscriber = transport.weights
    update = subscriber._poll(subscriber.client)  # as after a switch of replica: the worker holds 2
    assert update is not None and update.seq_no == 2
    assert subscriber.poll(held=2) is None  # the replica says 1, the primary 2: nothing newer, and no reset
    assert subscriber.resets == 0
    transport.close()

"""Fixtures of a real ``redis-server`` on a free loopback port, started by the tests.

The server class and the lookup of the binary live in ``redis_server.py`` (tests import
``RedisServer`` from there); this file holds only fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.redis_cluster import LocalCluster
from tests.integration.redis_server import RedisServer, redis_server_binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One server for the session; tests get it flushed through ``redis_url``."""
    server = RedisServer(executable=redis_server_binary())
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of the test's own, for tests that kill and restart it."""
    server = RedisServer(executable=redis_server_binary())
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """One Redis Cluster (3 masters, 3 replicas) for the session; tests that kill a node
    make their own (``own_cluster``)."""
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster: LocalCluster) -> str:
    for index in redis_cluster.alive():
        client = redis_cluster.client(index)
        if client.info("replication")["role"] == "master":
            client.flushall()
        client.close()
    return redis_cluster.url


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        yield cluster

"""A real ``redis-server`` (Debian's package) on a free loopback port, started by the tests.

Persistence is off (``--save '' --appendonly no``), as in production for experience. Where
redis-server is missing the tests are skipped on a laptop but FAIL under ``CI=true``: in
CI a silent skip would hide that the data plane was never tested.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
import redis

from rolloutfleet.embedded_redis import EmbeddedRedis


class RedisServer(EmbeddedRedis):
    """The product's embedded server, plus a client for assertions."""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def close(self) -> None:
        self.stop()


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server not found on PATH (Debian: apt-get install redis-server, or `make install`)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One server for the session; tests get it flushed through ``redis_url``."""
    server = RedisServer(executable=_binary())
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
    server = RedisServer(executable=_binary())
    server.start()
    yield server
    server.close()

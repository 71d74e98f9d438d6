"""A real ``redis-server`` (Debian's package) for the integration tests: the product's
embedded server plus a client for assertions. The fixtures (``redis_server``,
``redis_url``, ``own_redis``) are in this directory's conftest.py; tests import
``RedisServer`` from here, never from conftest.

Persistence is off (``--save '' --appendonly no``), as in production for experience. Where
redis-server is missing the tests are skipped on a laptop but FAIL under ``CI=true``: in
CI a silent skip would hide that the data plane was never tested.
"""

from __future__ import annotations

import os
import shutil

import pytest
import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis


class RedisServer(EmbeddedRedis):
    """The product's embedded server, plus a client for assertions."""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def close(self) -> None:
        self.stop()


def redis_server_binary() -> str:
    """The path of ``redis-server``; skips the test where it is missing (fails under CI)."""
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server not found on PATH (Debian: apt-get install redis-server, or `make install`)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return binary

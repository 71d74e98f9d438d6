"""The RLlib tier runs in the RLlib venv (`make test-rllib`, part of `make test`): RLlib 2.60 pins
gymnasium 1.2.2, the project's venv has 1.4.0. A real ``redis-server`` as in the integration
tier (missing: skipped on a laptop, a failure under ``CI=true``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.redis_server import RedisServer, redis_server_binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(executable=redis_server_binary())
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url

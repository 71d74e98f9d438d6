"""A Redis's connection budget read as the operator reads it (``INFO clients``), from a real
redis-server started with a low ``maxclients``."""

from __future__ import annotations

import pytest

from rolloutfleet.transport.redis.clients import ClientLimit, look, read_client_limit
from tests.integration.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.integration


def test_the_limit_in_force_and_the_clients_held_less_the_reader() -> None:
    server = RedisServer(executable=redis_server_binary(), extra_args=("--maxclients", "37")).start()
    try:
        held = [server.client() for _ in range(3)]
        for client in held:
            client.ping()  # connected (a client connects on its first command)
        assert read_client_limit(server.url) == ClientLimit(most=37, connected=3)
        for client in held:
            client.close()
    finally:
        server.close()


def test_a_redis_that_cannot_be_reached_reads_as_none() -> None:
    server = RedisServer(executable=redis_server_binary()).start()
    url = server.url
    server.close()
    assert read_client_limit(url) is None


def test_a_look_says_why_a_redis_cannot_be_reached_in_the_workers_words() -> None:
    server = RedisServer(executable=redis_server_binary()).start()
    url = server.url
    server.close()
    refused = look(url)
    assert refused.limit is None and refused.error is not None
    assert refused.error.startswith("redis at 127.0.0.1:") and refused.error.endswith(": connection refused")
    guarded = RedisServer(executable=redis_server_binary(), extra_args=("--requirepass", "s3cret")).start()
    try:
        told = look(guarded.url).error
        assert told is not None and "a password is required" in told and "spec.redis.passwordSecret" in told, told
        assert "s3cret" not in told
        reached = look(guarded.url, password="s3cret")
        assert reached.error is None and reached.limit is not None and reached.limit.connected == 0
    finally:
        guarded.close()

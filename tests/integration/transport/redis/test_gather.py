"""Publishing clients send a command's parts in one sendmsg (rolloutfleet.transport.redis.gather),
against a real redis-server: over TCP and a Unix socket, what arrives is what was sent;
a Redis that stops reading makes the send time out, the connection closes and nothing is
half-written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.gather import GatheringConnection, GatheringUnixConnection
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.integration


def test_publishing_clients_gather_and_a_large_xadd_arrives_byte_for_byte(redis_url: str) -> None:
    client = connect(redis_url, large_values=True)
    assert client.connection_pool.connection_class is GatheringConnection
    assert connect(redis_url).connection_pool.connection_class is redis.Connection  # readers: redis-py's own
    payload = np.random.default_rng(3).bytes(3 << 20)  # larger than the socket takes in one call
    entry_id = client.xadd("gathered", {b"payload": payload, b"seq": 7, b"producer": "p"})
    [(got_id, fields)] = redis.Redis.from_url(redis_url).xrange("gathered")
    assert got_id == entry_id and fields == {b"payload": payload, b"seq": b"7", b"producer": b"p"}


def test_a_send_that_redis_does_not_read_times_out_and_writes_nothing(own_redis: RedisServer) -> None:
    client = connect(own_redis.url, socket_timeout=0.5, large_values=True)
    client.ping()
    # SIGSTOP: the socket buffers fill and stay full.
    with own_redis.pause(), pytest.raises(redis.TimeoutError, match="Timeout writing to socket"):
        client.set("half", b"x" * (64 << 20))
    assert client.get("half") is None  # a new connection; the cut command was dropped with the old
    assert own_redis.client().exists("half") == 0


def test_a_publisher_over_a_unix_socket_gathers_and_its_batches_arrive(tmp_path: Path) -> None:
    path = tmp_path / "redis.sock"
    server = RedisServer(
        executable=redis_server_binary(), extra_args=("--unixsocket", str(path), "--unixsocketperm", "700")
    )
    server.start()
    try:
        url = f"unix://{path}"
        batch = {
            "obs": np.random.default_rng(5).standard_normal((2048, 4)).astype(np.float32),
            "actions": np.arange(2048),
        }
        with BatchConsumer(url, "cartpole", start="0") as consumer, BatchPublisher(url, "cartpole") as publisher:
            assert publisher.client.connection_pool.connection_class is GatheringUnixConnection
            publisher.publish(batch, worker_index=1)
            [message] = consumer.read(timeout=5)
            message.ack()
        np.testing.assert_array_equal(message.batch["obs"], batch["obs"])
        np.testing.assert_array_equal(message.batch["actions"], batch["actions"])
        assert server.client().xlen(job_keys("default", "cartpole").batches) == 1
    finally:
        server.close()

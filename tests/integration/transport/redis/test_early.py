"""Requests sent before their answers are needed, against a real redis-server (and a real
Redis Cluster): answers come back in order, a later request drops an earlier one's answers,
and an answer that is an error or a connection that dies loses only that request, said by
None and counted, while the next request goes out on a new connection."""

from __future__ import annotations

import redis

from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.early import EarlyRequests


def test_answers_of_a_request_sent_early_are_read_when_due(redis_url: str) -> None:
    client = connect(redis_url)
    client.mset({"{j}:a": b"1", "{j}:b": b"2"})
    client.hset("{j}:h", mapping={"x": "10"})
    early = EarlyRequests(client, "{j}:a")
    first = early.send(("MGET", "{j}:a", "{j}:b", "{j}:none"), ("HMGET", "{j}:h", "x", "y"))
    assert first is not None and early.in_flight
    client.set("{j}:a", b"3")  # another connection meanwhile: the request was already answered
    assert early.receive(first) == [[b"1", b"2", None], [b"10", None]]
    assert not early.in_flight and early.receive(first) is None  # once only
    # A second request before the first was read: the first's answers are dropped, not mixed in.
    second = early.send(("MGET", "{j}:a"))
    third = early.send(("MGET", "{j}:b"))
    assert second is not None and third is not None
    assert early.receive(second) is None and early.receive(third) == [[b"2"]]
    early.close()
    client.close()


def test_an_error_answer_or_a_dead_connection_loses_that_request_only(redis_url: str) -> None:
    client = connect(redis_url)
    client.hset("{j}:h", mapping={"x": "10"})
    client.set("{j}:a", b"1")
    early = EarlyRequests(client, "{j}:a")
    request = early.send(("GET", "{j}:h"), ("GET", "{j}:a"))  # WRONGTYPE for the first
    assert request is not None and early.receive(request) is None and early.failed == 1
    again = early.send(("GET", "{j}:a"))
    assert again is not None and early.receive(again) == [b"1"]  # a new connection, nothing left over
    admin = redis.Redis.from_url(redis_url)
    before = {c["id"] for c in admin.client_list()}
    host, port = early._connection._sock.getsockname()  # type: ignore[attr-defined]
    assert admin.client_kill(f"{host}:{port}")  # between requests: the next one's write or read fails
    request = early.send(("GET", "{j}:a"))
    assert (request is None or early.receive(request) is None) and early.failed == 2
    last = early.send(("GET", "{j}:a"))
    assert last is not None and early.receive(last) == [b"1"]
    assert {c["id"] for c in admin.client_list()} - before  # on a connection opened since
    early.close()
    client.close()


def test_on_a_cluster_the_request_goes_to_the_node_serving_its_keys(cluster_url: str) -> None:
    client = connect(cluster_url)
    keys = [f"{{league-job}}:blob:{i}" for i in range(5)]
    for i, key in enumerate(keys):
        client.set(key, str(i).encode())
    early = EarlyRequests(client, keys[0])
    request = early.send(("MGET", *keys))
    assert request is not None and early.receive(request) == [[str(i).encode() for i in range(5)]]
    early.close()
    client.close()

"""send_all: a command's parts reach the other end whole and in order, however few bytes
each sendmsg takes (a socket pair with small buffers, read by a thread). SPLICING packs
every command into the bytes redis-py's own packer does, a large value left uncopied."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np
import pytest
import redis
from redis._parsers import Encoder
from redis.connection import PythonRespSerializer

from rolloutfleet.transport.redis.gather import LARGE, MAX_PARTS, SPLICING, send_all


class CountingSocket:
    """The socket, with its sendmsg calls and the bytes each one took counted."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sent: list[int] = []

    def sendmsg(self, buffers: list[Any]) -> int:
        sent = self.sock.sendmsg(buffers)
        self.sent.append(sent)
        return sent


def receive(sock: socket.socket, into: bytearray) -> None:
    while True:
        chunk = sock.recv(4096)  # slowly: the sender's buffer fills and its sendmsg sends in part
        if not chunk:
            return
        into += chunk


def test_parts_of_any_size_and_number_arrive_whole_and_in_order() -> None:
    rng = np.random.default_rng(7)
    frames = rng.integers(0, 255, (3, 84, 84), dtype=np.uint8)  # a 2-D view of a part: sent as its bytes
    parts: list[bytes | memoryview] = [b"*3\r\n$4\r\nXADD\r\n", memoryview(frames), b"\r\n"]
    parts += [bytes([i % 251]) * (i % 7) for i in range(MAX_PARTS + 300)]  # more parts than one call takes
    parts += [rng.bytes(300_000), b"", memoryview(rng.bytes(70_001))[1:]]
    expected = b"".join(bytes(part) for part in parts)
    left, right = socket.socketpair()
    left.settimeout(10)  # as redis-py's sockets: a send takes what fits, then returns
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    right.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    received = bytearray()
    reader = threading.Thread(target=receive, args=(right, received))
    reader.start()
    counting = CountingSocket(left)
    send_all(counting, parts)  # type: ignore[arg-type]
    left.shutdown(socket.SHUT_WR)  # the reader sees the end, whatever was sent
    reader.join(30)
    left.close()
    right.close()
    assert bytes(received) == expected
    assert sum(counting.sent) == len(expected)
    assert len(counting.sent) > 2  # sent in part many times over: the resumption was exercised


def test_a_three_part_command_goes_in_one_call() -> None:
    left, right = socket.socketpair()
    counting = CountingSocket(left)
    payload = np.arange(50_000, dtype=np.int32)
    head, tail = b"*4\r\n$4\r\nXADD\r\n$200000\r\n", b"\r\n$1\r\n*\r\n"
    send_all(counting, [head, payload.data.cast("B"), tail])  # type: ignore[arg-type]
    left.close()
    received = b"".join(iter(lambda: right.recv(1 << 20), b""))
    right.close()
    assert counting.sent == [len(received)]
    assert received == head + payload.tobytes() + tail


REDIS_PY = PythonRespSerializer(LARGE, Encoder("utf-8", "strict", False).encode)
"""redis-py's pure-Python packer: the protocol's bytes to match, and the same cutoff."""
BIG = bytes(range(256)) * 40  # 10 240 bytes, over the cutoff
FIELDS = {b"payload": BIG, b"worker_index": 3, b"created_at": "1.5", b"seq": 0, b"min": -2, b"r": 0.1, b"n": "naïve"}
XADD = ("XADD", "jobs:a:batches", "MINID", "~", "1-0", *(item for pair in FIELDS.items() for item in pair))


@pytest.mark.parametrize(
    "args",
    [
        XADD,
        ("XINFO GROUPS", "stream"),  # a command name of two words, as a str
        (b"CLIENT SETNAME", b"publisher"),  # and as bytes
        ("SET", "key", BIG),  # the large value last
        ("SET", BIG, BIG),  # two in a row
        ("SET", "key", memoryview(BIG)),
        ("SET", "key", memoryview(b"small"), bytearray(b"also small"), b"", 1e20),
        ("SET", "key", b"x" * LARGE),  # at the cutoff: packed with the rest
    ],
    ids=["xadd", "str-name", "bytes-name", "last", "adjacent", "memoryview", "small-buffers", "at-cutoff"],
)
def test_commands_pack_into_the_bytes_redis_py_sends(args: tuple[Any, ...]) -> None:
    ours, theirs = SPLICING.pack(*args), REDIS_PY.pack(*args)
    assert b"".join(bytes(part) for part in ours) == b"".join(bytes(part) for part in theirs)
    large = [arg for arg in args if isinstance(arg, (bytes, memoryview)) and len(arg) > LARGE]
    assert [part for part in ours if any(part is arg for arg in args)] == large  # each a part, uncopied


def test_a_large_value_is_a_part_of_its_own_and_not_copied() -> None:
    payload = bytes(200_000)
    parts = SPLICING.pack("XADD", "s", "*", b"payload", payload, b"seq", 1)
    assert len(parts) == 3 and parts[1] is payload
    assert parts[0].endswith(b"$200000\r\n") and parts[2] == b"\r\n$3\r\nseq\r\n$1\r\n1\r\n"
    assert SPLICING.pack("PING") == [b"*1\r\n$4\r\nPING\r\n"]  # no large value: one part


@pytest.mark.parametrize("bad", [None, True, [1], {"a": 1}])
def test_an_argument_redis_cannot_take_is_a_data_error(bad: Any) -> None:
    with pytest.raises(redis.DataError):
        SPLICING.pack("SET", "key", bad)

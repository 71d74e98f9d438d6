"""send_all: a command's parts reach the other end whole and in order, however few bytes
each sendmsg takes (a socket pair with small buffers, read by a thread)."""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np

from rolloutfleet.transport.gather import MAX_PARTS, send_all


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

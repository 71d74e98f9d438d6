"""A command in parts, sent in one system call. :data:`SPLICING` packs a publish's XADD in
three parts (the command up to the payload, packed by hiredis in C; the payload itself,
uncopied; the fields after it), where redis-py's packers either copy the payload twice
(hiredis's) or pack each small argument in Python (its own, ~0.4 us each).
:data:`GATHERING`'s connections hand the parts to one ``sendmsg`` where redis-py sends
each with its own ``sendall``. A TLS socket has no ``sendmsg``, so ``rediss://`` keeps
redis-py's own connection (it takes the parts too); a Redis Cluster's client takes
neither. Measured in docs/transport.md, "Where the time goes".
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from redis.connection import AbstractConnection

__all__ = ["GATHERING", "SPLICING", "send_all"]

LARGE = 6000
"""Bytes above which an argument is sent as a part of its own, uncopied (redis-py's cutoff)."""

MAX_PARTS = 512
"""Buffers handed to one ``sendmsg`` (Linux takes up to 1 024: IOV_MAX)."""


def send_all(sock: socket.socket, parts: Sequence[bytes | memoryview]) -> None:
    """Send ``parts`` in order, in as few ``sendmsg`` calls as the socket takes them in."""
    views = [part if isinstance(part, memoryview) else memoryview(part) for part in parts]
    first = 0
    while first < len(views):
        sent = sock.sendmsg(views[first : first + MAX_PARTS])
        while first < len(views) and sent >= views[first].nbytes:  # whole parts sent
            sent -= views[first].nbytes
            first += 1
        if sent:  # a part sent in part: the rest of it goes next
            views[first] = views[first].cast("B")[sent:]


class SplicingPacker:
    """redis-py's command packer (``pack``), the small arguments packed by hiredis as its
    default packer does, each argument over :data:`LARGE` bytes spliced in as it is."""

    def pack(self, *args: Any) -> list[bytes | memoryview]:
        if isinstance(args[0], str):  # a command name of several words ("XINFO GROUPS")
            args = tuple(args[0].encode().split()) + args[1:]
        elif b" " in args[0]:
            args = tuple(args[0].split()) + args[1:]
        large = [index for index, arg in enumerate(args) if isinstance(arg, (bytes, memoryview)) and _size(arg) > LARGE]
        if not large:  # most commands: hiredis packs them whole
            return [_hiredis(args)]
        parts: list[bytes | memoryview] = []
        head, start = b"*%d\r\n" % len(args), 0
        for index in large:
            parts += (head + _bulk(args[start:index]) + b"$%d\r\n" % _size(args[index]), args[index])
            head, start = b"\r\n", index + 1
        parts.append(head + _bulk(args[start:]))
        return parts


def _size(arg: bytes | memoryview) -> int:
    return arg.nbytes if isinstance(arg, memoryview) else len(arg)


def _hiredis(args: tuple[Any, ...]) -> bytes:
    """``args`` as a RESP command, packed by hiredis."""
    plain: Any = tuple(bytes(arg) if isinstance(arg, (bytearray, memoryview)) else arg for arg in args)
    try:
        packed: bytes = hiredis.pack_command(plain)
    except TypeError as exc:  # as redis-py's own packers
        raise redis.DataError(str(exc)) from None
    return packed


def _bulk(args: tuple[Any, ...]) -> bytes:
    """``args`` as RESP bulk strings, without the command's array header."""
    if not args:
        return b""
    packed = _hiredis(args)
    return packed[packed.index(b"\r\n") + 2 :]


SPLICING = SplicingPacker()
"""The packer of a client that sends large values (``connect(large_values=True)``)."""


class _Gathering(AbstractConnection):
    """Sends a command packed in several parts with :func:`send_all`. Its errors become
    what redis-py's own ``send_packed_command`` raises, the connection closed."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if isinstance(command, (str, bytes)) or len(command) < 2:
            super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]
            return
        if not self._sock:
            self.connect_check_health(check_health=False)
        if check_health:
            self.check_health()  # type: ignore[no-untyped-call]
        try:
            send_all(self._sock, command)  # type: ignore[arg-type]
        except TimeoutError:  # socket.timeout
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.TimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            self.disconnect()  # type: ignore[no-untyped-call]
            raise redis.ConnectionError(f"Error {exc.errno} while writing to socket. {exc.strerror or exc}.") from exc
        except BaseException:
            self.disconnect()  # type: ignore[no-untyped-call]  # a part may have been sent: the connection cannot go on
            raise


class GatheringConnection(_Gathering, redis.Connection):
    """TCP."""


class GatheringUnixConnection(_Gathering, redis.UnixDomainSocketConnection):
    """A Unix socket."""


GATHERING: dict[str, type[Any]] = {"redis": GatheringConnection, "unix": GatheringUnixConnection}
"""The connection class of each URL scheme that sends gathered (``rediss``: none)."""

"""Sending a command of several parts in one system call: a publish's XADD is three (the
command up to the payload, the payload itself, uncopied, and the fields after it), which
redis-py sends with one ``sendall`` each. :data:`GATHERING`'s connections hand them to
one ``sendmsg`` instead: ~8 us less CPU a publish of a 185 KB CartPole batch on a 2-core
machine (docs/transport.md, "Where the time goes"). A TLS socket has no ``sendmsg``, so
``rediss://`` keeps redis-py's own connection; so does a Redis Cluster's client.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import AbstractConnection

__all__ = ["GATHERING", "send_all"]

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

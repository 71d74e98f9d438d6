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
import signal
import threading

import pytest
import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis


class RedisServer(EmbeddedRedis):
    """The product's embedded server, plus a client for assertions."""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def close(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)  # a test that failed while it was paused
        self.stop()

    def pause(self) -> Pause:
        """SIGSTOP the server; ``resume()`` the returned :class:`Pause` (or use it in ``with``)."""
        return Pause(self).start()


def tool_binary(name: str, package: str) -> str:
    """The path of ``name``; skips the test where it is missing (fails under CI)."""
    binary = shutil.which(name)
    if binary is None:
        message = f"{name} not found on PATH (Debian: apt-get install {package}, or `make install`)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


def redis_server_binary() -> str:
    """The path of ``redis-server``; skips the test where it is missing (fails under CI)."""
    return tool_binary("redis-server", "redis-server")


class Pause:
    """``redis-server`` stopped by SIGSTOP (a Redis that hangs: a long fork, a frozen VM, a
    node under memory pressure) until :meth:`resume` (SIGCONT) or the end of the ``with``.

    Clients' connections stay open and their commands queue in the kernel: a reply that
    timed out on the client side may still be executed once the server resumes.
    """

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.paused = False

    def start(self) -> Pause:
        assert self.server.process is not None
        self.server.process.send_signal(signal.SIGSTOP)
        self.paused = True
        return self

    def resume(self) -> None:
        if self.paused and self.server.process is not None:
            self.server.process.send_signal(signal.SIGCONT)
        self.paused = False

    def resume_after(self, seconds: float) -> threading.Timer:
        """Resume from a timer thread ``seconds`` from now (the test's own thread keeps calling)."""
        timer = threading.Timer(seconds, self.resume)
        timer.daemon = True
        timer.start()
        return timer

    def __enter__(self) -> Pause:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.resume()

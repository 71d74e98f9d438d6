"""A real ``redis-server`` (Debian's package) on a free loopback port, started by the tests.

Persistence is off (``--save '' --appendonly no``), as in production for experience. Where
redis-server is missing the tests are skipped on a laptop but FAIL under ``CI=true``: in
CI a silent skip would hide that the data plane was never tested.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process; :meth:`restart` keeps the port (clients reconnect to it)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="rolloutfleet-test-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--proto-max-bulk-len",
                "1gb",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.directory / 'redis.log').read_text()[-800:]}")
            try:
                if redis.Redis(port=self.port, socket_connect_timeout=0.2).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 10 s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash; with persistence off, every stream is gone after restart."""
        self.stop(signal.SIGKILL)

    def restart(self, down_s: float = 0.0) -> None:
        self.kill()
        time.sleep(down_s)
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server not found on PATH (Debian: apt-get install redis-server, or `make install`)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return binary


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One server for the session; tests get it flushed through ``redis_url``."""
    server = RedisServer(_binary())
    server.start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A server of the test's own, for tests that kill and restart it."""
    server = RedisServer(_binary())
    server.start()
    yield server
    server.close()

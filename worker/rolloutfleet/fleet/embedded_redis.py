"""A private ``redis-server`` on a free loopback port, for ``rolloutfleet run`` and the tests.

Experience needs no durability (measured: AOF costs 2-4x throughput), so persistence is
off; the data directory is a temp dir removed on stop.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from rolloutfleet.fleet.parent_watch import die_with_parent


class RedisNotAvailable(RuntimeError):
    """redis-server is missing or did not start."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """Start with :meth:`start` (or ``with``); ``url`` is where it listens.

    >>> with EmbeddedRedis() as redis:   # doctest: +SKIP
    ...     print(redis.url)
    redis://127.0.0.1:40123/0
    """

    def __init__(
        self,
        port: int | None = None,
        executable: str = "redis-server",
        maxmemory: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.port = port or free_port()
        self.executable = executable
        self.maxmemory = maxmemory
        self.extra_args = extra_args
        """More ``redis-server`` options (``--cluster-enabled yes`` ...)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.directory: Path | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        binary = shutil.which(self.executable)
        if binary is None:
            raise RedisNotAvailable(
                f"{self.executable} not found on PATH: install it (Debian: apt-get install redis-server, "
                "or `make install`), or pass --redis URL"
            )
        self.directory = Path(tempfile.mkdtemp(prefix="rolloutfleet-redis-"))
        args = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--protected-mode", "yes",
            "--proto-max-bulk-len", "1gb",
            "--client-output-buffer-limit", "pubsub 0 0 0",
        ]  # fmt: skip
        if self.maxmemory:
            args += ["--maxmemory", self.maxmemory]
        args += self.extra_args
        log = (self.directory / "redis.log").open("wb")
        self.process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Ctrl-C reaches only its owner, which stops it after the workers have published.
            start_new_session=True,
            # SIGTERMed by the kernel if its owner dies unstopped (SIGKILL): no orphan server.
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RedisNotAvailable(f"redis-server exited: {(self.directory / 'redis.log').read_text()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up (with a password: extra_args)
                        return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RedisNotAvailable(f"redis-server did not answer on port {self.port} within {timeout:.0f} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def kill(self) -> None:
        """SIGKILL: a crash; with persistence off, every stream is gone after the restart."""
        self.stop(signal.SIGKILL)

    def restart(self, down_s: float = 0.0) -> None:
        """Crash and come back on the same port after ``down_s`` (tests of reconnecting clients)."""
        self.kill()
        time.sleep(down_s)
        self.start()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

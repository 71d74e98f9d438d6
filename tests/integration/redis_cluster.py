"""A real Redis Cluster on loopback for the integration tests: 3 masters and 3 replicas,
each a ``redis-server --cluster-enabled yes`` (the product's embedded server with cluster
options), joined by ``redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes``.

Tests import :class:`LocalCluster` from here; the fixtures are in this directory's
conftest.py. Where redis-server or redis-cli is missing the tests are skipped on a laptop
but FAIL under ``CI=true`` (as in ``redis_server.py``).
"""

from __future__ import annotations

import socket
import subprocess
import time

import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.integration.redis_server import redis_server_binary, tool_binary

NODE_TIMEOUT_MS = 1000
"""How long a master may be silent before its replica takes over (kept short for tests)."""


def redis_cli_binary() -> str:
    """The path of ``redis-cli``; skips the test where it is missing (fails under CI)."""
    return tool_binary("redis-cli", "redis-tools")


def _cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def _fields(text: dict[str, str] | bytes | str) -> dict[str, str]:
    if isinstance(text, dict):  # redis-py parses CLUSTER INFO
        return {str(k): str(v) for k, v in text.items()}
    text = text.decode() if isinstance(text, bytes) else text
    return dict(line.split(":", 1) for line in text.split() if ":" in line)


class LocalCluster:
    """``masters`` masters with ``replicas`` replicas each; :attr:`url` is node 0's."""

    def __init__(self, masters: int = 3, replicas: int = 1, password: str | None = None) -> None:
        self.password = password
        options = (
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
            "--cluster-replica-validity-factor", "0",  # a replica may always take over
            *(("--requirepass", password, "--masterauth", password) if password else ()),
        )  # fmt: skip
        self.nodes = [
            EmbeddedRedis(port=_cluster_port(), executable=redis_server_binary(), extra_args=options)
            for _ in range(masters * (1 + replicas))
        ]
        self.replicas = replicas

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, timeout: float = 60.0) -> LocalCluster:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        subprocess.run(
            [redis_cli_binary(), *auth, "--cluster", "create", *addresses,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=True, capture_output=True, timeout=timeout,
        )  # fmt: skip
        self.wait_ok(timeout)
        return self

    def client(self, index: int) -> redis.Redis:
        return redis.Redis(port=self.nodes[index].port, password=self.password, socket_timeout=5)

    def alive(self) -> list[int]:
        return [i for i, node in enumerate(self.nodes) if node.process is not None]

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every live node says ``cluster_state:ok`` and every live replica is in sync."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._ok(i) for i in self.alive()):
                return
            time.sleep(0.1)
        raise AssertionError(f"the cluster did not become ok within {timeout:.0f} s")

    def _ok(self, index: int) -> bool:
        client = self.client(index)
        try:
            if _fields(client.execute_command("CLUSTER INFO")).get("cluster_state") != "ok":
                return False
            replication = client.info("replication")
            return replication["role"] == "master" or replication.get("master_link_status") == "up"
        except redis.RedisError:
            return False
        finally:
            client.close()

    def master_of(self, key: str) -> int:
        """The index of the node that serves ``key``'s slot now."""
        slot = int(self.client(self.alive()[0]).execute_command("CLUSTER KEYSLOT", key))
        for index in self.alive():
            client = self.client(index)
            try:
                if client.info("replication")["role"] != "master":
                    continue
                for start, end, *_ in client.execute_command("CLUSTER SLOTS"):
                    if int(start) <= slot <= int(end) and int(_[0][1]) == self.nodes[index].port:
                        return index
            finally:
                client.close()
        raise AssertionError(f"no live master serves slot {slot} of {key}")

    def kill(self, index: int) -> None:
        """SIGKILL node ``index`` (a crash; its replica takes over after the node timeout)."""
        self.nodes[index].kill()

    def close(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

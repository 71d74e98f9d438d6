"""What the end-to-end tests import: the repository's root, the control plane's handle
(``Cluster``), the operator processes' factory, ``wait_for`` and the diagnostics it fails
with. The fixtures that start all this are in this directory's conftest.py; tests import
from here, never from conftest.

``wait_for`` fails with diagnostics: every pod and the latest events of the cluster, what
the kubelet runs, and the tails of the kubelet's and its processes' logs. The fixtures
register what there is to describe in ``DIAGNOSTICS``.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.cluster.kubelet import LocalKubelet

REPO = Path(__file__).resolve().parents[2]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    if IN_CI:
        pytest.fail(what)
    pytest.skip(what)


@dataclass
class Cluster:
    state: Path
    kubectl_bin: str

    @property
    def kubeconfig(self) -> str:
        return str(self.state / "kubeconfig")

    @property
    def operator_kubeconfig(self) -> str:
        return str(self.state / "kubeconfig-operator")

    def kubectl(
        self, *args: str, check: bool = True, kubeconfig: str | None = None, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.kubectl_bin, "--kubeconfig", kubeconfig or self.kubeconfig, *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=60,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    def api(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=self.kubeconfig)


DIAGNOSTICS: dict[str, Callable[[], str]] = {}


def diagnostics() -> str:
    """What the cluster and the kubelet look like now (for a failure message)."""
    parts = []
    for name, describe in list(DIAGNOSTICS.items()):
        try:
            parts.append(describe())
        except Exception as error:  # noqa: BLE001 - diagnostics must never hide the real failure
            parts.append(f"({name} diagnostics failed: {error!r})")
    return "\n".join(parts)


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"({error})"


def cluster_diagnostics(cluster: Cluster) -> str:
    pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False).stdout
    events = cluster.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n--- pods ---\n{pods[-4000:]}\n--- events (latest) ---\n" + "\n".join(events.splitlines()[-30:])


def kubelet_diagnostics(node: LocalKubelet) -> str:
    assert node.work_dir is not None
    out = [f"\n--- kubelet {node.node_name} ---", node.describe(), "--- kubelet log (tail) ---"]
    out.append(_tail(node.work_dir / "kubelet.log", 30))
    logs = sorted(node.work_dir.glob("*.log"), key=lambda p: p.stat().st_mtime)
    for path in [p for p in logs if p.name != "kubelet.log"][-4:]:
        out.append(f"--- {path.name} (tail) ---\n{_tail(path, 15)}")
    return "\n".join(out)


def wait_for(
    condition: Callable[[], Any], timeout: float, describe: Callable[[], str] = lambda: "", interval: float = 0.2
) -> Any:
    """Poll ``condition`` until it returns something truthy and return that; on timeout fail
    with ``describe()`` and the cluster's and kubelet's diagnostics."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:.0f} s. {describe()}\n{diagnostics()}")


def describe_namespace(cluster: Cluster, namespace: str) -> str:
    pods = cluster.kubectl("-n", namespace, "get", "pods,rj", "-o", "wide", check=False).stdout
    events = cluster.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n--- objects ---\n{pods}\n--- events ---\n{events[-3000:]}"


def pod_json(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


@dataclass
class OperatorProcess:
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = 15) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def worker_port_block(size: int = 100) -> int:
    """A base port whose next ``size`` ports are free, below the kernel's ephemeral range.

    Pods of the test kubelet share this host's network, so a job's workers listen on
    base + index. Ports in the ephemeral range (32768-60999 by default) can be taken at any
    moment as the local port of an outgoing connection (a Redis or API client), and a
    worker's probe port taken that way fails its start ("Address already in use")."""
    low = 20000
    high = 32768 - size
    for _ in range(200):
        base = random.randrange(low, high) // 10 * 10
        if all(_bindable(base + i) for i in range(size)):
            return base
    raise RuntimeError(f"no {size} free ports in a row between {low} and {high + size}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class OperatorFactory:
    """Starts operator processes watching one namespace, as the chart's Deployment does."""

    def __init__(self, cluster: Cluster, namespace: str, tmp: Path, port_base: int) -> None:
        self.cluster, self.namespace, self.tmp, self.port_base = cluster, namespace, tmp, port_base
        self.started: list[OperatorProcess] = []

    def start(
        self, standalone: bool = True, metrics_port: int = 0, extra_env: dict[str, str] | None = None, **more_env: str
    ) -> OperatorProcess:
        """``extra_env`` / ``more_env``: more of the operator's settings (``ROLLOUTFLEET_...``), as the chart's env."""
        from rolloutfleet.fleet.embedded_redis import free_port

        log = self.tmp / f"operator-{len(self.started)}.log"
        env = {
            **os.environ,
            "KUBECONFIG": self.cluster.operator_kubeconfig,
            "ROLLOUTFLEET_WORKER_COMMAND": json.dumps([sys.executable, "-m", "rolloutfleet.cli.main", "worker"]),
            "ROLLOUTFLEET_WORKER_METRICS_PORT": str(self.port_base),
            "ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1",
            "ROLLOUTFLEET_GRACE_SECONDS": "5",
            **(extra_env or {}),
            **more_env,
        }
        args = [sys.executable, "-m", "rolloutfleet_operator", "--namespace", self.namespace]
        args += ["--liveness-port", str(free_port()), "--metrics-port", str(metrics_port)]
        if standalone:
            args.append("--standalone")
        with log.open("wb") as out:
            process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        operator = OperatorProcess(process, log)
        self.started.append(operator)
        return operator

    def stop_all(self) -> None:
        for operator in self.started:
            operator.stop()

"""End-to-end fixtures: the real control plane of ``hack/cluster`` (etcd, kube-apiserver,
kube-controller-manager built from pinned upstream modules), the test kubelet, a real
redis-server, a fresh namespace per test.

Without Go or redis-server these tests are skipped on a laptop but FAIL under
``CI=true``: in CI a silent skip would hide that nothing was proven on a real API server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))

from kubelet import LocalKubelet  # noqa: E402

from rolloutfleet.embedded_redis import EmbeddedRedis  # noqa: E402

pytestmark = pytest.mark.e2e
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


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if shutil.which("go") is None and not os.environ.get("CLUSTER_BIN_DIR"):
        cache = Path.home() / ".cache" / "rolloutfleet" / "cluster"
        if not any(cache.glob("*/bin/kube-apiserver")):
            missing("no Go toolchain to build the control plane (and no cached build)")
    state = tmp_path_factory.mktemp("cluster")
    up = subprocess.run([str(REPO / "hack/cluster/up.sh"), str(state)], capture_output=True, text=True, check=False)
    if up.returncode != 0:
        missing(f"hack/cluster/up.sh failed:\n{up.stderr[-3000:]}")
    tools = subprocess.run([str(REPO / "hack/cluster/get-tools.sh")], capture_output=True, text=True, check=False)
    if tools.returncode != 0:
        subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], check=False)
        missing(f"kubectl could not be fetched:\n{tools.stderr[-2000:]}")
    kubectl = str(Path(tools.stdout.strip().splitlines()[-1]) / "kubectl")
    try:
        yield Cluster(state, kubectl)
    finally:
        subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], capture_output=True, check=False)


@pytest.fixture(scope="session")
def kubelet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKubelet]:
    node = LocalKubelet(cluster.kubeconfig, gpus=1, work_dir=tmp_path_factory.mktemp("kubelet")).start()
    yield node
    node.stop()


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api())


@pytest.fixture
def namespace(cluster: Cluster, core: client.CoreV1Api) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server not found on PATH (make install)")
    assert binary is not None
    server = EmbeddedRedis(executable=binary).start()
    yield server
    server.stop()


def wait_for(
    condition: Callable[[], Any], timeout: float, describe: Callable[[], str] = lambda: "", interval: float = 0.2
) -> Any:
    """Poll ``condition`` until it returns something truthy; on timeout fail with ``describe()``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:.0f} s. {describe()}")


def describe_namespace(cluster: Cluster, namespace: str) -> str:
    pods = cluster.kubectl("-n", namespace, "get", "pods,rj", "-o", "wide", check=False).stdout
    events = cluster.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n--- objects ---\n{pods}\n--- events ---\n{events[-3000:]}"


def pod_json(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = cluster.kubectl("-n", namespace, "get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/rolloutjobs.rolloutfleet.io", "--timeout=30s")


@pytest.fixture(scope="session")
def operator_rbac(cluster: Cluster, crds: None) -> str:
    """The operator's rules (rolloutfleet_operator.rbac, which the chart renders) bound to
    the least-privilege test user of hack/cluster: the operator never runs as admin."""
    from rolloutfleet_operator.rbac import RULES

    user = "rolloutfleet-operator-test"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "rolloutfleet-operator-e2e"},
        "rules": RULES,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "rolloutfleet-operator-e2e"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "rolloutfleet-operator-e2e",
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cluster.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [role, binding]})
    )
    return user


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


class OperatorFactory:
    """Starts operator processes watching one namespace, as the chart's Deployment does."""

    def __init__(self, cluster: Cluster, namespace: str, tmp: Path, port_base: int) -> None:
        self.cluster, self.namespace, self.tmp, self.port_base = cluster, namespace, tmp, port_base
        self.started: list[OperatorProcess] = []

    def start(self, standalone: bool = True) -> OperatorProcess:
        from rolloutfleet.embedded_redis import free_port

        log = self.tmp / f"operator-{len(self.started)}.log"
        env = {
            **os.environ,
            "KUBECONFIG": self.cluster.operator_kubeconfig,
            "ROLLOUTFLEET_WORKER_COMMAND": json.dumps([sys.executable, "-m", "rolloutfleet.cli", "worker"]),
            "ROLLOUTFLEET_WORKER_METRICS_PORT": str(self.port_base),
            "ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1",
            "ROLLOUTFLEET_GRACE_SECONDS": "5",
        }
        args = [sys.executable, "-m", "rolloutfleet_operator", "--namespace", self.namespace]
        args += ["--liveness-port", str(free_port()), "--metrics-port", "0"]
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


@pytest.fixture
def operators(
    cluster: Cluster, operator_rbac: str, kubelet: LocalKubelet, namespace: str, tmp_path: Path
) -> Iterator[OperatorFactory]:
    # Workers of one job listen on base + index (pods share this host's network).
    port_base = 20000 + (abs(hash(namespace)) % 400) * 100
    factory = OperatorFactory(cluster, namespace, tmp_path, port_base)
    yield factory
    # Jobs carry the operator's finalizer: let the operator release them before it stops,
    # so the namespace (and its worker processes) really goes away.
    cluster.kubectl("-n", namespace, "delete", "rj", "--all", "--timeout=60s", check=False)
    factory.stop_all()

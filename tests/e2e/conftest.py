"""End-to-end fixtures: the real control plane of ``hack/cluster`` (etcd, kube-apiserver,
kube-controller-manager built from pinned upstream modules), the test kubelet
(``tests/cluster/kubelet.py``), a real redis-server, a fresh namespace per test.

The control plane's binaries are built (or found in the cache) once per run, after
collection, outside any test's timeout: a cold build takes many minutes. Without Go
(and no cached build), a failed build or no redis-server, these tests are skipped on a
laptop but FAIL under ``CI=true``: in CI a silent skip would hide that nothing was proven
on a real API server.

What tests import (``REPO``, ``Cluster``, ``OperatorFactory``, ``wait_for`` and its
diagnostics, ...) lives in ``cluster_kit.py``; this file holds only fixtures and hooks.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_guard import start_control_plane
from tests.e2e.cluster_kit import (
    DIAGNOSTICS,
    REPO,
    Cluster,
    OperatorFactory,
    cluster_diagnostics,
    kubelet_diagnostics,
    missing,
    worker_port_block,
)
from tests.e2e.jobs import Jobs

_BUILD: dict[str, str] = {}  # "bin_dir" or "error", filled once per run


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build (or find cached) the control plane once, before any e2e test runs, so a cold
    build is not cut short by a test's timeout."""
    here = Path(__file__).resolve().parent
    ours = [item for item in items if Path(str(item.path)).resolve().is_relative_to(here)]
    for item in ours:
        item.add_marker(pytest.mark.e2e)  # so `-m "not e2e"` leaves them out
    if _BUILD or not ours:
        return
    if os.environ.get("CLUSTER_BIN_DIR"):
        _BUILD["bin_dir"] = os.environ["CLUSTER_BIN_DIR"]
        return
    if shutil.which("go") is None:
        cached = sorted((Path.home() / ".cache" / "rolloutfleet" / "cluster").glob("*/bin/kube-apiserver"))
        if cached:
            _BUILD["bin_dir"] = str(cached[-1].parent)
        else:
            _BUILD["error"] = "no Go toolchain to build the control plane (and no cached build); see hack/cluster/"
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "e2e: hack/cluster/build.sh, hack/kueue/build.sh (cached after the first build; a cold one takes minutes)"
        )
    started = time.monotonic()
    build = subprocess.run([str(REPO / "hack/cluster/build.sh")], capture_output=True, text=True, check=False)
    if build.returncode != 0 or not build.stdout.strip():
        _BUILD["error"] = f"hack/cluster/build.sh failed (exit {build.returncode}):\n{build.stderr[-4000:]}"
        return
    _BUILD["bin_dir"] = build.stdout.strip().splitlines()[-1]
    kueue = subprocess.run([str(REPO / "hack/kueue/build.sh")], capture_output=True, text=True, check=False)
    if kueue.returncode != 0 or not kueue.stdout.strip():
        _BUILD["error"] = f"hack/kueue/build.sh failed (exit {kueue.returncode}):\n{kueue.stderr[-4000:]}"
        return
    _BUILD["kueue_dir"] = kueue.stdout.strip().splitlines()[-1]
    if reporter is not None and time.monotonic() - started > 5:
        reporter.write_line(f"e2e: control plane built in {time.monotonic() - started:.0f} s")


@pytest.fixture(scope="session")
def cluster_env() -> dict[str, str]:
    """The environment hack/cluster/up.sh runs in: the control plane (and Kueue) built or cached."""
    if "error" in _BUILD:
        missing(_BUILD["error"])
    env = dict(os.environ)
    if "bin_dir" in _BUILD:
        env["CLUSTER_BIN_DIR"] = _BUILD["bin_dir"]
    if "kueue_dir" in _BUILD:
        env["KUEUE_DIR"] = _BUILD["kueue_dir"]
    return env


@pytest.fixture(scope="session")
def cluster(cluster_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    env = cluster_env
    state = tmp_path_factory.mktemp("cluster")
    guard = None
    try:
        up, guard = start_control_plane(state, env)  # stopped by its guard if this run is killed
        if up.returncode != 0:
            missing(f"hack/cluster/up.sh failed:\n{up.stderr[-3000:]}")
        tools = subprocess.run([str(REPO / "hack/cluster/get-tools.sh")], capture_output=True, text=True, check=False)
        if tools.returncode != 0:
            missing(f"kubectl could not be fetched:\n{tools.stderr[-2000:]}")
        kubectl = str(Path(tools.stdout.strip().splitlines()[-1]) / "kubectl")
        found = Cluster(state, kubectl)
        DIAGNOSTICS["cluster"] = lambda: cluster_diagnostics(found)
        yield found
    finally:
        DIAGNOSTICS.pop("cluster", None)
        subprocess.run([str(REPO / "hack/cluster/down.sh"), str(state)], capture_output=True, check=False)
        if guard is not None:
            guard.kill()
            guard.wait()


@pytest.fixture(scope="session")
def kubelet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKubelet]:
    """The session's node: 1 GPU, pods run as local processes; its own log in work_dir/kubelet.log."""
    work = tmp_path_factory.mktemp("kubelet")
    handler = logging.FileHandler(work / "kubelet.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(levelname)s %(message)s"))
    logger = logging.getLogger("test-kubelet")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    node = LocalKubelet(cluster.kubeconfig, gpus=1, work_dir=work).start()
    DIAGNOSTICS["kubelet"] = lambda: kubelet_diagnostics(node)
    try:
        yield node
    finally:
        DIAGNOSTICS.pop("kubelet", None)
        node.stop()
        logger.removeHandler(handler)
        handler.close()


@pytest.fixture
def core(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(cluster.api())


@pytest.fixture
def namespace(cluster: Cluster, core: client.CoreV1Api) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def jobs(cluster: Cluster, namespace: str) -> Jobs:
    """This test's namespace's RolloutJobs and their pods."""
    return Jobs(cluster, namespace)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        missing("redis-server not found on PATH (make install)")
    assert binary is not None
    server = EmbeddedRedis(executable=binary).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(REPO / "crds"))
    # `kubectl wait` fails at once (not waits) while the new CRD has no conditions yet.
    wait = ("wait", "--for=condition=Established", "crd/rolloutjobs.rolloutfleet.io", "--timeout=30s")
    for _ in range(30):
        if cluster.kubectl(*wait, check=False).returncode == 0:
            return
        time.sleep(1)
    cluster.kubectl(*wait)


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


@pytest.fixture
def operators(
    cluster: Cluster, operator_rbac: str, kubelet: LocalKubelet, namespace: str, tmp_path: Path
) -> Iterator[OperatorFactory]:
    # Workers of one job listen on base + index (pods share this host's network).
    factory = OperatorFactory(cluster, namespace, tmp_path, worker_port_block())
    try:
        yield factory
    finally:
        # Jobs carry the operator's finalizer: let the operator release them before it
        # stops, so the namespace (and its worker processes) really goes away. kubectl's
        # own wait (30 s) ends before the subprocess limit (60 s), and the operators are
        # stopped whatever happened.
        try:
            cluster.kubectl("-n", namespace, "delete", "rj", "--all", "--timeout=30s", check=False)
        finally:
            factory.stop_all()

"""The test kubelet against the real API server: what the e2e tests rely on it for."""

from __future__ import annotations

import signal
import sys
import textwrap
from typing import Any

from conftest import Cluster, pod_json, wait_for
from kubelet import LocalKubelet
from kubernetes import client


def make_pod(name: str, script: str, **extra: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "ignored", "command": [sys.executable, "-c", textwrap.dedent(script)]}
    container.update(extra.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **extra},
    }


def phase(cluster: Cluster, namespace: str, name: str) -> str | None:
    pod = pod_json(cluster, namespace, name)
    return None if pod is None else pod["status"].get("phase")


def terminated(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    pod = pod_json(cluster, namespace, name)
    assert pod is not None
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


def test_a_pod_runs_to_completion(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_secret(namespace, {"metadata": {"name": "s"}, "stringData": {"token": "hunter2"}})
    script = """
        import os, sys
        assert os.environ["FROM_SECRET"] == "hunter2", os.environ.get("FROM_SECRET")
        assert os.environ["POD_NAME"] == "ok"
        print("hello from", os.environ["POD_NAME"])
    """
    env = [
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    core.create_namespaced_pod(namespace, make_pod("ok", script, container={"env": env}))
    wait_for(
        lambda: phase(cluster, namespace, "ok") == "Succeeded", 30, lambda: str(pod_json(cluster, namespace, "ok"))
    )
    assert terminated(cluster, namespace, "ok")["exitCode"] == 0
    pod = pod_json(cluster, namespace, "ok")
    assert pod is not None and pod["spec"]["nodeName"] == kubelet.node_name
    assert "hello from ok" in kubelet.log_path(namespace, "ok").read_text()


def test_a_failing_pod_reports_its_exit_code_and_termination_message(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    script = """
        import os, sys
        open(os.environ["MESSAGE_FILE"], "w").write("the env cannot be built: no module named foo\\n")
        sys.exit(3)
    """
    env = [{"name": "MESSAGE_FILE", "value": "/dev/termination-log"}]
    core.create_namespaced_pod(namespace, make_pod("bad", script, container={"env": env}))
    wait_for(lambda: phase(cluster, namespace, "bad") == "Failed", 30)
    state = terminated(cluster, namespace, "bad")
    assert state["exitCode"] == 3 and state["reason"] == "Error"
    assert "the env cannot be built" in state["message"]


def test_readiness_probe_sets_ready_and_kill_fails_the_pod(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    from rolloutfleet.embedded_redis import free_port

    port = free_port()
    script = f"""
        import http.server, time
        time.sleep(1.0)
        http.server.HTTPServer(("127.0.0.1", {port}), http.server.SimpleHTTPRequestHandler).serve_forever()
    """
    probe = {"httpGet": {"path": "/", "port": port}, "periodSeconds": 1}
    core.create_namespaced_pod(namespace, make_pod("web", script, container={"readinessProbe": probe}))

    def ready() -> bool:
        pod = pod_json(cluster, namespace, "web")
        conditions = (pod or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(lambda: phase(cluster, namespace, "web") == "Running", 30)
    wait_for(ready, 30)
    kubelet.kill(namespace, "web", signal.SIGKILL)
    wait_for(lambda: phase(cluster, namespace, "web") == "Failed", 30)
    assert terminated(cluster, namespace, "web")["exitCode"] == 128 + signal.SIGKILL
    assert not ready()


def test_deleting_a_pod_sigterms_its_process_then_removes_it(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "got-sigterm"
    script = f"""
        import signal, sys, time
        def bye(*_):
            open({str(marker)!r}, "w").write("SIGTERM")
            sys.exit(0)
        signal.signal(signal.SIGTERM, bye)
        while True:
            time.sleep(0.1)
    """
    core.create_namespaced_pod(namespace, make_pod("svc", script, terminationGracePeriodSeconds=10))
    wait_for(lambda: phase(cluster, namespace, "svc") == "Running", 30)
    wait_for(lambda: kubelet.pid(namespace, "svc"), 10)
    cluster.kubectl("-n", namespace, "delete", "pod", "svc", "--wait=false")
    wait_for(lambda: pod_json(cluster, namespace, "svc") is None, 30)
    assert marker.read_text() == "SIGTERM"


def test_an_over_asked_pod_stays_pending_as_unschedulable(
    cluster: Cluster, kubelet: LocalKubelet, core: client.CoreV1Api, namespace: str
) -> None:
    greedy = make_pod("greedy", "print(1)", container={"resources": {"limits": {"nvidia.com/gpu": "2"}}})
    core.create_namespaced_pod(namespace, greedy)

    def unschedulable() -> dict[str, Any] | None:
        pod = pod_json(cluster, namespace, "greedy") or {}
        return next(
            (
                c
                for c in pod.get("status", {}).get("conditions") or []
                if c["type"] == "PodScheduled" and c["status"] == "False"
            ),
            None,
        )

    condition = wait_for(unschedulable, 30)
    assert condition["reason"] == "Unschedulable" and "nvidia.com/gpu" in condition["message"]
    pod = pod_json(cluster, namespace, "greedy")
    assert pod is not None and not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"

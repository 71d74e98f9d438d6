"""Probe pods for the node tier's traffic tests: each serves HTTP on a port and, through
``kubectl exec`` (the real kubelet), opens TCP connections and says what it got."""

from __future__ import annotations

from typing import Any

from tests.node.nodekit import Node, chart_app_version, wait_for

SLIM = f"ghcr.io/rolloutfleet/worker:{chart_app_version()}-slim"
PORT = 8000

PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except TimeoutError:
    print("timeout")
except ConnectionRefusedError:
    print("refused")
except OSError as error:
    print(type(error).__name__, error)
"""


def probe_pod(name: str, labels: dict[str, str], node_name: str | None = None) -> dict[str, Any]:
    """A restricted pod of the slim worker image serving HTTP on :data:`PORT` (on
    ``node_name`` when given, past the scheduler)."""
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "readOnlyRootFilesystem": True, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    container = {
        "name": "probe",
        "image": SLIM,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "http.server", str(PORT), "--directory", "/tmp"],
        "securityContext": restricted,
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}},
        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 2},
    }
    spec: dict[str, Any] = {"automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
                            "containers": [container]}  # fmt: skip
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def reach(node: Node, namespace: str, pod: str, host: str, port: int) -> str:
    """What a new TCP connection from ``pod`` to ``host:port`` gets: ``connected``,
    ``refused``, ``timeout`` or the error's name."""
    out = node.kubectl("-n", namespace, "exec", pod, "--", "python3", "-c", PROBE, host, str(port), timeout=60)
    return out.strip().splitlines()[-1]


def settles(node: Node, namespace: str, pod: str, host: str, port: int, want: str, timeout: float = 60) -> None:
    """``pod`` gets ``want`` at ``host:port`` within ``timeout`` s: a changed policy, a new
    pod or a new Service is applied by the node's controllers within seconds."""
    seen: list[str] = []

    def got() -> bool:
        seen.append(reach(node, namespace, pod, host, port))
        return seen[-1] == want

    wait_for(
        got, timeout, lambda: f"{pod} -> {host}:{port}: wanted {want}, got {seen[-5:]}. {node.diagnostics(namespace)}"
    )

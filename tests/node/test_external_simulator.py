"""An external env on a real node: simulators that only use PolicyClient drive CartPole
through the job's Service, and the job's stream holds exactly their transitions.

One Helm release (``rolloutfleet`` in namespace ``ext``, the chart's defaults) and one job
with ``spec.env.external``. Two simulator processes, one after the other, each stepping
gymnasium's CartPole itself:

* on the host, connecting to the Service's ClusterIP: host -> kube-proxy's DNAT rule for
  the Service -> the worker pod's address on the node's bridge -> the worker's container;
* in a pod of its own (the worker -slim image, which has gymnasium and the client),
  connecting to the Service's DNS name: CoreDNS, then kube-proxy, from a pod's network.

A ``kubectl delete pod`` of the worker (SIGTERM from the real kubelet) publishes the rows
short of a fragment; every row in the stream is then compared with what the simulators
saw and did.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.fleet_helpers import read_until
from tests.node.nodekit import REPO, Node, chart_app_version, wait_for

NS = "ext"
RELEASE = "rolloutfleet"
JOB = "sim"
PORT = 9900
SIMULATOR = REPO / "tests" / "integration" / "external" / "simulator.py"


SLIM = f"ghcr.io/rolloutfleet/worker:{chart_app_version()}-slim"


def job_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": JOB},
        "spec": {
            "replicas": 1,
            "env": {"id": "CartPole-v1", "external": {"port": PORT, "maxClients": 4, "episodeTimeoutSeconds": 300}},
            "sampling": {"rolloutFragmentLength": 25, "seed": 0},
            "redis": {
                "url": "rediss://rolloutfleet-redis:6379/0",
                "tls": {"caSecret": {"name": "rolloutfleet-redis-ca"}},
                "passwordSecret": {"name": "rolloutfleet-redis", "key": "password"},
                "maxLen": 1000,
            },
            "resources": {"cpu": "250m", "memory": "256Mi"},
        },
    }


def simulator_pod(address: str, seed: int, episodes: int) -> dict[str, Any]:
    """tests/integration/external/simulator.py run by the image's python3, its log on stdout."""
    command = ["python3", "-c", SIMULATOR.read_text(), address, "/dev/stdout", "--seed", str(seed),
               "--episodes", str(episodes)]  # fmt: skip
    restricted = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True,
                  "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}
    container = {"name": "simulator", "image": SLIM, "imagePullPolicy": "IfNotPresent", "command": command,
                 "securityContext": restricted, "resources": resources}  # fmt: skip
    spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "simulator"}, "spec": spec}


def redis_consumer(node: Node) -> BatchConsumer:
    """The job's stream from the host: the chart's Redis over TLS with its CA (the Service's
    address is not among the certificate's names: the chain is verified, the name not)."""
    service = node.get(NS, "service", "rolloutfleet-redis")
    password = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis")["data"]["password"]).decode()
    ca = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis-ca")["data"]["ca.crt"])
    ca_file = Path(tempfile.gettempdir()) / "rolloutfleet-node-ext-redis-ca.crt"
    ca_file.write_bytes(ca)
    url = f"rediss://{service['spec']['clusterIP']}:6379/0?ssl_ca_certs={ca_file}&ssl_check_hostname=false"
    return BatchConsumer(url, JOB, namespace=NS, group="node-test", password=password)


def status(node: Node) -> dict[str, Any]:
    return (node.get(NS, "rj", JOB) or {}).get("status") or {}


def logged(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_install_the_chart(node: Node) -> None:
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace")
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)


def test_the_service_selects_the_ready_worker(node: Node) -> None:
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(job_manifest()))
    wait_for(lambda: status(node).get("readyReplicas") == 1, 300, lambda: node.diagnostics(NS))
    service = wait_for(lambda: node.get(NS, "service", f"{JOB}-external"), 60, lambda: node.diagnostics(NS))
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("external", PORT, "external")
    ]
    pod = node.get(NS, "pod", f"{JOB}-worker-0")
    assert pod["spec"]["containers"][0]["image"] == SLIM  # numpy policy: the operator picks the slim image

    # The API server's endpoints of the Service: the worker pod's address, ready, on the port.
    def endpoints() -> list[tuple[str, bool, int]] | None:
        slices = node.get(NS, "endpointslices", "-l", f"kubernetes.io/service-name={JOB}-external")
        found = [(address, bool(e["conditions"].get("ready")), p["port"])
                 for s in (slices or {}).get("items", []) for e in s.get("endpoints") or []
                 for address in e["addresses"] for p in s.get("ports") or []]  # fmt: skip
        return found or None

    found = wait_for(endpoints, 60, lambda: node.diagnostics(NS))
    assert found == [(pod["status"]["podIP"], True, PORT)]
    assert service["spec"]["clusterIP"] != pod["status"]["podIP"]


@pytest.mark.timeout(900)
def test_simulators_through_the_service_and_the_stream_holds_exactly_their_transitions(
    node: Node, tmp_path: Path
) -> None:
    consumer = redis_consumer(node)
    cluster_ip = node.get(NS, "service", f"{JOB}-external")["spec"]["clusterIP"]
    # From the host: the ClusterIP exists only as kube-proxy's rule on this node.
    host_log = tmp_path / "host.jsonl"
    subprocess.run(
        [sys.executable, "-m", "tests.integration.external.simulator", f"{cluster_ip}:{PORT}", str(host_log),
         "--seed", "1000", "--episodes", "3"], cwd=REPO, check=True, timeout=300,
    )  # fmt: skip
    host_steps = logged(host_log.read_text())

    # From a pod: the Service's DNS name through CoreDNS.
    address = f"{JOB}-external.{NS}.svc:{PORT}"
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(simulator_pod(address, 2000, 3)))

    def finished() -> str | None:
        phase = (node.get(NS, "pod", "simulator") or {}).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(finished, 300, lambda: node.diagnostics(NS))
    pod_out = node.kubectl("-n", NS, "logs", "simulator")
    assert phase == "Succeeded", pod_out[-3000:]
    pod_steps = logged(pod_out)
    steps = host_steps + pod_steps
    assert sum(s["terminated"] or s["truncated"] for s in steps) == 6  # 2 simulators x 3 whole episodes

    # SIGTERM from the kubelet: the worker publishes the rows short of a fragment, then exits.
    node.kubectl("-n", NS, "delete", "pod", f"{JOB}-worker-0", "--wait=true", "--timeout=90s", timeout=120)
    messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= len(steps), timeout=120)
    consumer.close()
    batch = SampleBatch.concat([m.batch for m in messages])
    assert {m.metadata.worker_index for m in messages} == {0}
    index = {(int(e), int(t)): i for i, (e, t) in enumerate(zip(batch["eps_id"], batch["t"], strict=True))}
    assert len(index) == len(batch) == len(steps)  # every row one of the simulators' steps, none twice
    for step in steps:
        i = index[(step["eps_id"], step["t"])]
        assert np.array_equal(batch["obs"][i], np.float32(step["obs"]))
        assert np.array_equal(batch["new_obs"][i], np.float32(step["new_obs"]))
        assert int(batch["actions"][i]) == step["action"] and float(batch["rewards"][i]) == step["reward"]
        assert (bool(batch["terminateds"][i]), bool(batch["truncateds"][i])) == (step["terminated"], step["truncated"])
    assert {s["eps_id"] for s in host_steps}.isdisjoint(s["eps_id"] for s in pod_steps)


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    node.kubectl("-n", NS, "delete", "pod", "simulator", "--ignore-not-found", "--timeout=60s", check=False)
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)

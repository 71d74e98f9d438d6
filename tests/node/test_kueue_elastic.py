"""An elastic RolloutJob under the real Kueue, with real containers on the real node: the
chart's operator is Kueue's external framework, and Kueue runs with its
``ElasticJobsViaWorkloadSlices`` gate (hack/kueue/up.sh). Scaled past its quota, the job
keeps its running workers (same pods, no restart, no gap in their batches) while the new
one waits in Kueue's words; the new one starts when the quota grows; scaled down, the
quota goes back to the ClusterQueue.
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet import BatchConsumer
from tests.node.nodekit import Node, wait_for

NS = "elastic"
RELEASE = "rolloutfleet"
JOB = "grow"
QUEUE = "node-elastic"
WORKER = {"cpu": "250m", "memory": "256Mi"}


def quota(workers: int) -> list[dict[str, str]]:
    return [{"name": "cpu", "nominalQuota": f"{250 * workers}m"},
            {"name": "memory", "nominalQuota": f"{256 * workers}Mi"}]  # fmt: skip


def cluster_queue(workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": QUEUE},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                "flavors": [{"name": QUEUE, "resources": quota(workers)}]}],
        },
    }  # fmt: skip


def job_manifest() -> dict[str, Any]:
    return {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {
            "name": JOB,
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
            "annotations": {"kueue.x-k8s.io/elastic-job": "true"},
        },
        "spec": {
            "replicas": 2,
            "env": {"id": "CartPole-v1", "numEnvs": 2},
            "sampling": {"rolloutFragmentLength": 50, "seed": 0},
            "redis": {"maxLen": 10000, "backpressure": "dropOldest"},  # the chart's Redis (no url: its default)
            "resources": WORKER,
        },
    }


def status(node: Node) -> dict[str, Any]:
    return (node.get(NS, "rj", JOB) or {}).get("status") or {}


def workers(node: Node) -> dict[str, tuple[str, int]]:
    """Live worker pods: name -> (UID, container restarts)."""
    pods = node.get(NS, "pods", "-l", f"rolloutfleet.io/job={JOB}") or {"items": []}
    found = {}
    for pod in pods["items"]:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        restarts = sum(c.get("restartCount", 0) for c in (pod.get("status") or {}).get("containerStatuses") or [])
        found[pod["metadata"]["name"]] = (pod["metadata"]["uid"], restarts)
    return found


def reserved_cpu(node: Node) -> str:
    found = node.get("default", "clusterqueues.kueue.x-k8s.io", QUEUE) or {}
    for flavor in (found.get("status") or {}).get("flavorsReservation") or []:
        for resource in flavor["resources"]:
            if resource["name"] == "cpu":
                return str(resource["total"])
    return "0"


def consumer(node: Node) -> BatchConsumer:
    """The job's stream from the host, through the chart's TLS Redis (its CA; the Service's
    address is not among the certificate's names, so the chain is verified, not the name)."""
    service = node.get(NS, "service", "rolloutfleet-redis")
    password = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis")["data"]["password"]).decode()
    ca = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis-ca")["data"]["ca.crt"])
    ca_file = Path(tempfile.gettempdir()) / "rolloutfleet-node-elastic-redis-ca.crt"
    ca_file.write_bytes(ca)
    url = f"rediss://{service['spec']['clusterIP']}:6379/0?ssl_ca_certs={ca_file}&ssl_check_hostname=false"
    return BatchConsumer(url, JOB, namespace=NS, group="node-test", password=password, block_s=0.5)


class Seen:
    """Every batch read, by producer (one worker process): its sequence numbers."""

    def __init__(self) -> None:
        self.seqs: dict[tuple[int, str], list[int]] = defaultdict(list)

    def read(self, reader: BatchConsumer, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            messages = reader.read(count=64, timeout=0.5)
            for message in messages:
                self.seqs[(message.metadata.worker_index, message.metadata.producer)].append(message.metadata.seq)
            reader.ack(messages)

    def producers(self, index: int) -> list[str]:
        return [producer for (i, producer) in self.seqs if i == index]


def test_install_the_chart_and_a_queue(node: Node) -> None:
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace")
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": QUEUE}}
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": QUEUE, "namespace": NS}, "spec": {"clusterQueue": QUEUE}}  # fmt: skip
    for item in (flavor, cluster_queue(2), local):
        node.kubectl("apply", "-f", "-", input=json.dumps(item))


@pytest.mark.timeout(900)
def test_scaled_past_its_quota_the_job_keeps_its_workers_and_the_third_waits_then_starts(node: Node) -> None:
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(job_manifest()))
    wait_for(lambda: status(node).get("readyReplicas") == 2, 300, lambda: node.diagnostics(NS))
    before = workers(node)
    assert sorted(before) == [f"{JOB}-worker-0", f"{JOB}-worker-1"]
    reader, seen = consumer(node), Seen()
    seen.read(reader, 5)
    assert seen.producers(0) and seen.producers(1)

    node.kubectl("-n", NS, "scale", f"rj/{JOB}", "--replicas", "3")

    def third_waits() -> dict[str, Any] | None:
        found = status(node)
        kueue = found.get("kueue") or {}
        waits = kueue.get("queuedWorkers") == [2] and "insufficient" in (kueue.get("message") or "")
        return found if waits else None

    found = wait_for(third_waits, 120, lambda: node.diagnostics(NS))
    assert found["phase"] == "Running" and found["reason"] == "ScaleUpQueued", found
    seen.read(reader, 15)  # the two keep sampling while the third waits
    assert workers(node) == before, (before, workers(node))

    # The quota grows: the third starts, the two run on.
    node.kubectl("apply", "-f", "-", input=json.dumps(cluster_queue(3)))
    wait_for(lambda: status(node).get("readyReplicas") == 3, 300, lambda: node.diagnostics(NS))
    seen.read(reader, 5)
    now = workers(node)
    assert {name: now[name] for name in before} == before, (before, now)
    assert (status(node).get("kueue") or {}).get("queuedWorkers") == []
    assert seen.producers(2)
    for index in (0, 1):  # one process each, every batch it sent read: no restart, no gap
        (producer,) = seen.producers(index)
        seqs = sorted(seen.seqs[(index, producer)])
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), (index, seqs[:5], len(seqs))
    reader.close()

    # Scaled down: Kueue gets the quota back.
    node.kubectl("-n", NS, "scale", f"rj/{JOB}", "--replicas", "1")
    wait_for(lambda: reserved_cpu(node) == "250m", 120, lambda: node.diagnostics(NS))
    wait_for(lambda: list(workers(node)) == [f"{JOB}-worker-0"], 120, lambda: node.diagnostics(NS))
    assert workers(node)[f"{JOB}-worker-0"] == before[f"{JOB}-worker-0"]
    assert status(node).get("restarts", 0) == 0


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.kubectl("-n", NS, "delete", "localqueue", QUEUE, "--ignore-not-found", check=False)
    node.kubectl("delete", "clusterqueue", QUEUE, "--ignore-not-found", check=False)
    node.kubectl("delete", "resourceflavor", QUEUE, "--ignore-not-found", check=False)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)

"""Disruptions on a real API server and controller-manager: the Eviction API against the
job's PodDisruptionBudget, and a node that stops reporting (a partition) while its worker
keeps publishing. Neither is a failure: ``status.restarts`` stays 0, ``status.disruptions``
counts them, and a learner's consumer sees every batch of both workers once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.transport.consumer import BatchConsumer
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest

SECOND_NODE = "rolloutfleet-test-node-b"


def evict(core: client.CoreV1Api, namespace: str, name: str) -> int:
    """POST a policy/v1 Eviction for the pod (what `kubectl drain` does); the HTTP status."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    try:
        core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
    except ApiException as error:
        return int(error.status or 0)
    return 201


def pdb(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    policy = client.PolicyV1Api(cluster.api())
    try:
        found = policy.read_namespaced_pod_disruption_budget(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return dict(policy.api_client.sanitize_for_serialization(found))


def test_an_evicted_worker_is_a_disruption_and_the_pdb_refuses_one_eviction_too_many(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    metadata = {"labels": {"team": "rl", "cost-center": "42"}, "annotations": {"example.com/note": "a / b"}}
    manifest = job_manifest(
        "evict", redis_server.url, replicas=2, disruption={"maxUnavailable": 1}, template={"metadata": metadata}
    )
    jobs.create(manifest)
    wait_for(lambda: jobs.status("evict").get("readyReplicas") == 2, 90, jobs.describe)
    uid = jobs.get("evict")["metadata"]["uid"]
    for pod in jobs.pods("evict").values():  # the job's pod metadata, next to the operator's own
        assert metadata["labels"].items() <= pod["metadata"]["labels"].items()
        assert pod["metadata"]["labels"]["rolloutfleet.io/job"] == "evict"
        assert pod["metadata"]["annotations"]["example.com/note"] == "a / b"

    def budget_counts_both() -> dict[str, Any] | None:
        found = pdb(cluster, namespace, "evict-workers")
        status = (found or {}).get("status") or {}
        ok = status.get("currentHealthy") == 2 and status.get("disruptionsAllowed") == 1
        if found and not ok and any(c.get("reason") == "SyncFailed" for c in status.get("conditions") or []):
            # This cluster's controller-manager started before the CRD existed: its RESTMapper
            # learns RolloutJob within 30 s, and a failed PDB syncs again on its next change.
            poke = {"metadata": {"annotations": {"e2e.rolloutfleet.io/poke": str(time.monotonic())}}}
            client.PolicyV1Api(cluster.api()).patch_namespaced_pod_disruption_budget("evict-workers", namespace, poke)
        return found if ok else None

    # The disruption controller reads the job's replicas through the scale subresource.
    budget = wait_for(budget_counts_both, 90, lambda: f"{pdb(cluster, namespace, 'evict-workers')}", interval=2)
    owner = budget["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("RolloutJob", "evict", uid)
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert budget["status"]["expectedPods"] == 2

    old = jobs.pods("evict")["evict-worker-0"]["metadata"]["uid"]
    assert evict(jobs.core, namespace, "evict-worker-0") == 201
    assert evict(jobs.core, namespace, "evict-worker-1") == 429  # one at a time: the budget is spent

    def replaced() -> dict[str, Any] | None:
        status = jobs.status("evict")
        pod = jobs.pods("evict").get("evict-worker-0")
        fresh = pod is not None and pod["metadata"]["uid"] != old and not pod["metadata"].get("deletionTimestamp")
        return status if fresh and status.get("readyReplicas") == 2 else None

    status = wait_for(replaced, 90, jobs.describe)
    assert status["restarts"] == 0 and status["disruptions"]["Evicted"] == 1, status
    assert sum(status["disruptions"].values()) == 1
    assert status["workers"]["0"]["restarts"] == 0 and status["workers"]["0"]["lastDisruptedPod"] == old
    events = jobs.core.list_namespaced_event(namespace, field_selector="reason=WorkerDisrupted").items
    assert len(events) == 1 and events[0].type == "Normal" and "Evicted: EvictionByEvictionAPI" in events[0].message
    # The job's PDB goes with the job (owner reference, garbage collector).
    cluster.kubectl("-n", namespace, "delete", "rj", "evict", "--timeout=30s")
    wait_for(lambda: pdb(cluster, namespace, "evict-workers") is None, 60, jobs.describe)


@pytest.fixture
def second_node(cluster: Cluster, kubelet: LocalKubelet, tmp_path: Path) -> Iterator[LocalKubelet]:
    """A second node for one test; its pods' ports shifted (they share this host with the first)."""
    handler = logging.FileHandler(tmp_path / "kubelet.log")
    logging.getLogger("test-kubelet").addHandler(handler)
    node = LocalKubelet(cluster.kubeconfig, node_name=SECOND_NODE, work_dir=tmp_path, port_offset=1000).start()
    try:
        yield node
    finally:
        node.stop()
        logging.getLogger("test-kubelet").removeHandler(handler)
        handler.close()
        cluster.kubectl("delete", "node", SECOND_NODE, "--wait=false", check=False)
        cluster.kubectl("-n", "kube-node-lease", "delete", "lease", SECOND_NODE, check=False)
        cluster.kubectl("uncordon", kubelet.node_name, check=False)


class Learner(threading.Thread):
    """Reads and acks every batch of the job, remembering each one's (producer, seq)."""

    def __init__(self, url: str, job: str, namespace: str) -> None:
        super().__init__(daemon=True)
        self.consumer = BatchConsumer(url, job, namespace=namespace, group="learner")
        self.seen: list[tuple[str, int]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            messages = self.consumer.read(timeout=0.5)
            self.seen += [(m.metadata.producer, m.metadata.seq) for m in messages]
            self.consumer.ack(messages)

    def by_producer(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for producer, seq in list(self.seen):
            found.setdefault(producer, []).append(seq)
        return found


def test_a_lost_node_s_worker_runs_elsewhere_and_both_batches_arrive_once(
    cluster: Cluster,
    kubelet: LocalKubelet,
    second_node: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    cluster.kubectl("cordon", kubelet.node_name)  # the worker starts on the second node
    operators.start()
    manifest = job_manifest(
        "lost",
        redis_server.url,
        replicas=1,
        redis={"maxLen": 100_000, "backpressure": "block"},
        disruption={"nodeLossSeconds": 5},
    )
    jobs.create(manifest)
    learner = Learner(redis_server.url, "lost", namespace)
    learner.start()
    try:
        wait_for(lambda: jobs.running("lost", 1), 90, jobs.describe)
        first = jobs.pods("lost")["lost-worker-0"]
        assert first["spec"]["nodeName"] == SECOND_NODE
        tolerated = {t["key"]: t.get("tolerationSeconds") for t in first["spec"]["tolerations"]}
        assert tolerated["node.kubernetes.io/unreachable"] == 5 and tolerated["node.kubernetes.io/not-ready"] == 5
        old_producer = wait_for(lambda: next(iter(learner.by_producer()), None), 60, jobs.describe)
        cluster.kubectl("uncordon", kubelet.node_name)
        old_pid = second_node.pid(namespace, "lost-worker-0")

        second_node.partition()  # the node goes silent; its worker keeps sampling and publishing

        def tainted() -> bool:
            node = client.CoreV1Api(cluster.api()).read_node(SECOND_NODE)
            return any(
                t.key == "node.kubernetes.io/unreachable" and t.effect == "NoExecute" for t in node.spec.taints or []
            )

        wait_for(tainted, 90, lambda: cluster.kubectl("describe", "node", SECOND_NODE, check=False).stdout[-2000:])

        def replaced_elsewhere() -> dict[str, Any] | None:
            pod = jobs.pods("lost").get("lost-worker-0")
            moved = pod is not None and pod["metadata"]["uid"] != first["metadata"]["uid"]
            running = moved and pod["spec"].get("nodeName") == kubelet.node_name and jobs.running("lost", 1)
            return pod if running else None

        # nodeLossSeconds (5) after the taint, plus a delete the lost kubelet never confirms.
        wait_for(replaced_elsewhere, 60, jobs.describe)
        assert second_node.pid(namespace, "lost-worker-0") == old_pid  # still alive on the lost node

        def both_publish() -> bool:
            counts = {p: len(s) for p, s in learner.by_producer().items()}
            return len(counts) == 2 and all(c >= 5 for c in counts.values())

        seen_before = len(learner.by_producer().get(old_producer, []))
        wait_for(both_publish, 60, lambda: f"{ {p: len(s) for p, s in learner.by_producer().items()} }")
        assert len(learner.by_producer()[old_producer]) > seen_before  # it published after the partition
        status = wait_for(lambda: (s := jobs.status("lost")).get("disruptions", {}).get("NodeTainted") == 1 and s, 30)
        assert status["restarts"] == 0 and status["workers"]["0"]["restarts"] == 0
    finally:
        second_node.stop()  # the lost worker ends with its node
        learner.stopping.set()
        learner.join(timeout=10)
    # Every batch of both producers exactly once: no duplicate dropped, no gap, nothing twice.
    assert learner.consumer.stats.duplicates == 0
    assert len(learner.seen) == len(set(learner.seen))
    for producer, seqs in learner.by_producer().items():
        assert sorted(seqs) == list(range(min(seqs), max(seqs) + 1)), producer

"""Two real nodes (``make cluster-up NODE=real NODES=2``; ``make e2e-node`` starts two): the
second in a network namespace of its own, with its own containerd, kubelet, kube-proxy
and kube-router. Pods of one reach pods and Services of the other; a 4-worker job runs 2
on each (the operator's default spread over ``kubernetes.io/hostname``); a node cut off
the network (``hack/node/cut.sh``) has its workers replaced on the other, counted as a
disruption, with every batch read once; a drain moves workers under the job's budget.

The rest of the tier runs on node 1 alone: the conftest cordons the others, and this
module uncordons node 2 for its tests and cordons it again after.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from rolloutfleet import BatchConsumer
from tests.node import probes
from tests.node.nodekit import REPO, Node, Seen, chart_redis, wait_for

NS = "two"
RELEASE = "rolloutfleet"
JOB = "spread"
NODE_LOSS_SECONDS = 10
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="module")
def second(node: Node) -> Iterator[str]:
    """Node 2's name, uncordoned for this module's tests."""
    if int(node.facts.get("NODES", "1")) < 2:
        reason = "one node only: make e2e-node starts two (NODES=2)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    name = node.facts["NODE_2_NAME"]
    wait_for(lambda: node_ready(node, name), 120, lambda: node.kubectl("describe", "node", name, check=False)[-2000:])
    # A namespace of an earlier run may still be going.
    node.kubectl("delete", "namespace", NS, "--ignore-not-found", "--timeout=180s", timeout=190)
    # The chart first, while node 2 is cordoned: Redis and the operator run on node 1, where
    # the host (this test's learner) reaches Redis as a local address, which the chart's
    # NetworkPolicy lets in from the node itself only.
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace")
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("uncordon", name)
    yield name
    subprocess.run([str(REPO / "hack/node/cut.sh"), "--restore", "2", str(node.state)], check=False, timeout=30)
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.kubectl("-n", NS, "delete", "pod", "--all", "--timeout=60s", check=False, timeout=70)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)
    node.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)
    node.kubectl("uncordon", node.facts["NODE_NAME"], check=False)
    node.kubectl("cordon", name, check=False)


def node_ready(node: Node, name: str) -> bool:
    got = json.loads(node.kubectl("get", "node", name, "-o", "json"))
    return any(c["type"] == "Ready" and c["status"] == "True" for c in got["status"]["conditions"])


def reach(node: Node, pod: str, host: str, port: int) -> str:
    return probes.reach(node, NS, pod, host, port)


def connects(node: Node, pod: str, host: str, port: int) -> None:
    probes.settles(node, NS, pod, host, port, "connected")


def status(node: Node) -> dict[str, Any]:
    return (node.get(NS, "rj", JOB) or {}).get("status") or {}


def placement(node: Node) -> dict[str, str]:
    """Live worker pods: name -> the node it runs on (Ready ones only)."""
    pods = node.get(NS, "pods", "-l", f"rolloutfleet.io/job={JOB}") or {"items": []}
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName", "")
        for p in pods["items"]
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    }


def on_nodes(node: Node) -> Counter[str]:
    return Counter(placement(node).values())


class Reader:
    """A learner on the host reading the job's stream all along, in a thread."""

    def __init__(self, node: Node) -> None:
        url, password = chart_redis(node, NS, RELEASE)
        self.consumer = BatchConsumer(url, JOB, namespace=NS, group="two-nodes", password=password, block_s=0.5)
        self.seen = Seen()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.seen.read(self.consumer, 1.0)

    def close(self) -> dict[tuple[int, str], list[int]]:
        self.stop.set()
        self.thread.join(timeout=30)
        self.seen.read(self.consumer, 3.0)  # what is left
        return self.seen.seqs


def test_two_nodes_ready_and_their_pods_reach_each_other(node: Node, second: str) -> None:
    first = node.facts["NODE_NAME"]
    ready = json.loads(node.kubectl("get", "nodes", "-o", "json"))["items"]
    conditions = {n["metadata"]["name"]: {c["type"]: c["status"] for c in n["status"]["conditions"]} for n in ready}
    assert conditions[first]["Ready"] == conditions[second]["Ready"] == "True"
    for name, where in (("probe-1", first), ("probe-2", second)):
        # A learner's label: the chart's Redis admits it (its NetworkPolicy, enforced here).
        labels = {"probe": name, "rolloutfleet.io/learner": "true"}
        node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(probes.probe_pod(name, labels, where)))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "probe-2"},
               "spec": {"selector": {"probe": "probe-2"}, "ports": [{"port": 80, "targetPort": probes.PORT}]}}  # fmt: skip
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(service))
    node.kubectl("-n", NS, "wait", "--for=condition=Ready", "pod", "probe-1", "probe-2", "--timeout=180s", timeout=190)
    pods = {p["metadata"]["name"]: p for p in node.get(NS, "pods")["items"]}
    ip_2 = pods["probe-2"]["status"]["podIP"]
    assert ip_2.startswith(node.facts["NODE_2_IP"].rsplit(".", 1)[0] + "."), ip_2  # node 2's own pod CIDR
    # kube-proxy programs a new Service's rules on each node within seconds of its endpoints:
    # each path is tried until it connects (a minute at most).
    connects(node, "probe-1", ip_2, probes.PORT)  # pod to pod, across nodes
    connects(node, "probe-1", f"probe-2.{NS}.svc", 80)  # a Service by name, its endpoint on node 2
    connects(node, "probe-2", pods["probe-1"]["status"]["podIP"], probes.PORT)
    connects(node, "probe-2", f"{RELEASE}-redis", 6379)  # the chart's Redis, on node 1
    connects(node, "probe-2", "kubernetes.default.svc", 443)  # the API server, on node 1


@pytest.mark.timeout(600)
def test_four_workers_run_two_per_node(node: Node, second: str) -> None:
    manifest = {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": JOB},
        "spec": {
            "replicas": 4,
            "env": {"id": "CartPole-v1", "numEnvs": 2},
            "sampling": {"rolloutFragmentLength": 200, "seed": 0},
            # A short stream with `block` (the default): the fleet waits for this test's
            # learner instead of running thousands of entries ahead of it, and trims nothing.
            "redis": {"maxLen": 500},
            "resources": {"cpu": "250m", "memory": "256Mi"},
            "disruption": {"nodeLossSeconds": NODE_LOSS_SECONDS},
        },
    }
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(manifest))
    wait_for(lambda: status(node).get("readyReplicas") == 4, 300, lambda: node.diagnostics(NS))
    assert on_nodes(node) == {node.facts["NODE_NAME"]: 2, second: 2}, placement(node)
    assert status(node)["image"] == probes.SLIM


@pytest.mark.timeout(900)
def test_a_node_cut_off_has_its_workers_replaced_on_the_other_with_every_batch_read_once(
    node: Node, second: str
) -> None:
    first = node.facts["NODE_NAME"]
    reader = Reader(node)
    try:
        wait_for(lambda: {i for i, _ in reader.seen.seqs} == {0, 1, 2, 3}, 120, lambda: node.diagnostics(NS))
        before = status(node)
        cut_workers = {name for name, where in placement(node).items() if where == second}
        assert len(cut_workers) == 2
        producers_before = set(reader.seen.seqs)
        t0 = time.monotonic()
        subprocess.run([str(REPO / "hack/node/cut.sh"), "2", str(node.state)], check=True, timeout=30)

        def replaced() -> bool:
            return on_nodes(node) == {first: 4} and status(node).get("readyReplicas") == 4

        wait_for(replaced, 300, lambda: node.diagnostics(NS))
        moved_s = time.monotonic() - t0
        print(f"node 2 cut off: its 2 workers Ready again on {first} after {moved_s:.0f} s")
        node_state = json.loads(node.kubectl("get", "node", second, "-o", "json"))
        ready = next(c for c in node_state["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "Unknown", ready  # the kubelet stopped reporting
        # The cut workers' replacements publish: new producers for their indexes.
        cut_indexes = {int(name.rsplit("-", 1)[1]) for name in cut_workers}

        def replacements_publish() -> bool:
            return cut_indexes <= {index for index, _ in set(reader.seen.seqs) - producers_before}

        wait_for(replacements_publish, 120, lambda: node.diagnostics(NS))
    finally:
        seqs = reader.close()
    after = status(node)
    disruptions, earlier = after.get("disruptions") or {}, before.get("disruptions") or {}
    assert disruptions.get("NodeTainted", 0) == earlier.get("NodeTainted", 0) + 2, after
    assert after.get("restarts", 0) == before.get("restarts", 0), after
    # Exactly once: each producer's sequence numbers, as read, run 0, 1, 2, ... with no gap
    # and no repeat (the cut workers' up to the cut: nothing they sent was lost or doubled).
    for (index, producer), got in seqs.items():
        assert got == list(range(got[0], got[0] + len(got))), (index, producer, got[:5], len(got))
        assert got[0] == 0, (index, producer, got[:5])
    assert {i for i, _ in seqs} == {0, 1, 2, 3}
    subprocess.run([str(REPO / "hack/node/cut.sh"), "--restore", "2", str(node.state)], check=True, timeout=30)
    wait_for(
        lambda: node_ready(node, second), 120, lambda: node.kubectl("describe", "node", second, check=False)[-2000:]
    )


@pytest.mark.timeout(600)
def test_a_drain_moves_the_workers_to_the_other_node_within_the_budget(node: Node, second: str) -> None:
    first = node.facts["NODE_NAME"]
    # The taint of the cut is gone once node 2 reports again; the workers are all on node 1.
    wait_for(lambda: not json.loads(node.kubectl("get", "node", second, "-o", "json"))["spec"].get("taints"), 120)
    assert on_nodes(node) == {first: 4}
    before = status(node)
    # The budget (maxUnavailable 25 %: 1 of 4) lets one worker go at a time: kubectl drain
    # retries each refused eviction until its replacement on node 2 is Ready.
    out = node.kubectl("drain", first, "--pod-selector", f"rolloutfleet.io/job={JOB}", "--delete-emptydir-data",
                       "--ignore-daemonsets", "--timeout=300s", timeout=320)  # fmt: skip
    try:
        assert "drained" in out, out
        wait_for(lambda: on_nodes(node) == {second: 4} and status(node).get("readyReplicas") == 4, 120,
                 lambda: node.diagnostics(NS))  # fmt: skip
        after = status(node)
        evicted = (after.get("disruptions") or {}).get("Evicted", 0) - (before.get("disruptions") or {}).get(
            "Evicted", 0
        )
        assert evicted == 4, after
        assert after.get("restarts", 0) == before.get("restarts", 0), after
    finally:
        node.kubectl("uncordon", first)

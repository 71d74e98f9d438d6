"""The chart's and the operator's NetworkPolicies, tested by traffic: the real node runs
kube-router's NetworkPolicy controller (hack/netpol), so what a policy does not allow is
dropped, and a connection to it times out.

Probe pods open TCP connections from inside the cluster (kubectl exec through the real
kubelet) and report ``connected``, ``refused`` or ``timeout``. kube-router rejects what a
policy does not allow (ICMP port unreachable), so a blocked connection is refused at once,
as a port nothing listens on would be: each blocked path is therefore shown open from the
same pod to the same address once its policy is gone (or widened), and the tests fail if
the block came from anything but the policy.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.node import probes
from tests.node.nodekit import Node, wait_for

NS = "netpol"
RELEASE = "rolloutfleet"
JOB = "fenced"
TARGET_PORT = probes.PORT
SCRAPER = {"rolloutfleet.io/scraper": "true"}
# Pods of the namespace: one with the learner label, one with the label the operator's
# metrics policy admits, one with neither. Each serves HTTP on TARGET_PORT.
PROBES = {
    "learner": {"rolloutfleet.io/learner": "true"},
    "scraper": SCRAPER,
    "stranger": {"probe": "stranger"},
}
BLOCKED = "refused"  # kube-router's REJECT; an enforcer that drops would make it "timeout"


def reach(node: Node, pod: str, host: str, port: int) -> str:
    return probes.reach(node, NS, pod, host, port)


def settles(node: Node, pod: str, host: str, port: int, want: str, timeout: float = 60) -> None:
    probes.settles(node, NS, pod, host, port, want, timeout)


def pod_ip(node: Node, name: str) -> str:
    return node.get(NS, "pod", name)["status"]["podIP"]


def worker_pod(node: Node) -> str:
    pods = node.get(NS, "pods", "-l", f"rolloutfleet.io/job={JOB}") or {"items": []}
    ready = [p["metadata"]["name"] for p in pods["items"]
             if not p["metadata"].get("deletionTimestamp")
             and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]  # fmt: skip
    assert len(ready) == 1, node.diagnostics(NS)
    return ready[0]


def removed_then_restored(node: Node, kind: str, name: str) -> dict[str, Any]:
    """Delete an object and return what re-creates it as it was."""
    saved = node.get(NS, kind, name)
    assert saved, f"no {kind} {name} in {NS}"
    node.kubectl("-n", NS, "delete", kind, name)
    meta = saved["metadata"]
    keep = {key: meta[key] for key in ("name", "namespace", "labels", "annotations") if key in meta}
    return {**saved, "metadata": keep}


def test_install_the_chart_and_the_probes(node: Node) -> None:
    scraper_peer = json.dumps([{"podSelector": {"matchLabels": SCRAPER}}])
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace",
              "--set-json", f"networkPolicy.operatorMetricsFrom={scraper_peer}")  # fmt: skip
    for name, labels in PROBES.items():
        node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(probes.probe_pod(name, labels)))
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "wait", "--for=condition=Ready", "pod", *PROBES, "--timeout=180s", timeout=190)


def test_only_learner_labelled_pods_of_the_namespace_reach_redis(node: Node) -> None:
    redis_host = f"{RELEASE}-redis.{NS}.svc"
    settles(node, "learner", redis_host, 6379, "connected")
    assert reach(node, "stranger", redis_host, 6379) == BLOCKED
    assert reach(node, "scraper", redis_host, 6379) == BLOCKED
    # The same pod, the same Service: without the chart's policy the connection is made.
    policy = removed_then_restored(node, "networkpolicy", f"{RELEASE}-redis")
    settles(node, "stranger", redis_host, 6379, "connected")
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(policy))
    settles(node, "stranger", redis_host, 6379, BLOCKED)
    assert reach(node, "learner", redis_host, 6379) == "connected"


def test_the_operators_metrics_port_only_from_what_its_policy_names(node: Node) -> None:
    operator = node.get(NS, "pods", "-l", "app.kubernetes.io/component=operator")["items"][0]
    address = operator["status"]["podIP"]
    settles(node, "scraper", address, 9090, "connected")
    assert reach(node, "stranger", address, 9090) == BLOCKED
    assert reach(node, "stranger", address, 8080) == "connected"  # its health port: the kubelet's probes
    policy = removed_then_restored(node, "networkpolicy", f"{RELEASE}-operator")
    settles(node, "stranger", address, 9090, "connected")
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(policy))
    settles(node, "stranger", address, 9090, BLOCKED)


@pytest.mark.timeout(600)
def test_a_worker_reaches_redis_and_dns_and_what_its_job_allows_only(node: Node) -> None:
    manifest = {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": JOB},
        "spec": {"replicas": 1, "env": {"id": "CartPole-v1"}, "resources": {"cpu": "250m", "memory": "256Mi"}},
    }
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(manifest))
    # Ready means its Redis answered: through the egress policy, by name (DNS).
    wait_for(lambda: ((node.get(NS, "rj", JOB) or {}).get("status") or {}).get("readyReplicas") == 1, 300,
             lambda: node.diagnostics(NS))  # fmt: skip
    assert node.get(NS, "networkpolicy", f"{JOB}-egress")["spec"]["policyTypes"] == ["Egress"]
    worker = worker_pod(node)
    stranger, learner = pod_ip(node, "stranger"), pod_ip(node, "learner")
    assert reach(node, worker, f"{RELEASE}-redis", 6379) == "connected"
    settles(node, worker, stranger, TARGET_PORT, BLOCKED)
    # The probes reach each other: the path is open to anyone the policy does not cover.
    assert reach(node, "learner", stranger, TARGET_PORT) == "connected"

    # spec.network.egress opens exactly what it names: the stranger's port, not the learner's.
    allow = [{"to": [{"podSelector": {"matchLabels": PROBES["stranger"]}}],
              "ports": [{"port": TARGET_PORT, "protocol": "TCP"}]}]  # fmt: skip
    node.kubectl(
        "-n", NS, "patch", "rj", JOB, "--type=merge", "-p", json.dumps({"spec": {"network": {"egress": allow}}})
    )
    wait_for(lambda: len(node.get(NS, "networkpolicy", f"{JOB}-egress")["spec"]["egress"]) == 3, 60,
             lambda: json.dumps(node.get(NS, "networkpolicy", f"{JOB}-egress")))  # fmt: skip
    wait_for(lambda: ((node.get(NS, "rj", JOB) or {}).get("status") or {}).get("readyReplicas") == 1, 300,
             lambda: node.diagnostics(NS))  # fmt: skip
    worker = worker_pod(node)
    settles(node, worker, stranger, TARGET_PORT, "connected")
    assert reach(node, worker, learner, TARGET_PORT) == BLOCKED
    assert reach(node, worker, f"{RELEASE}-redis", 6379) == "connected"


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.kubectl("-n", NS, "delete", "pod", *PROBES, "--ignore-not-found", "--timeout=60s", check=False, timeout=70)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)
    node.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)

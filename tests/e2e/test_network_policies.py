"""The NetworkPolicies against the real API server and the real pods' labels: the chart's
(Redis admits the operator, the workers and pods labelled as learners; the operator's pod
its health and metrics ports) and the one the operator writes for each job (its workers
reach DNS, the chart's Redis and what ``spec.network.egress`` adds), with the operator run
as the chart's Deployment configures it and its least-privilege RBAC.

What is checked is what the API server accepts and whom each selector selects, evaluated by
the API server over the namespace's pods (the operator's worker pods, and pods carrying the
operator's, Redis's and a learner's labels, bound to no node so that nothing runs them).
Whether packets are dropped is the CNI plugin's business: the bridge plugin of the node
tier enforces no NetworkPolicy (docs/operations/security.md).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest
from tests.e2e.test_chart import helm, render

__all__ = ["helm"]  # the module fixture, shared with test_chart.py

EGRESS = {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 443}]}


def selected(core: client.CoreV1Api, namespace: str, peer_selector: dict[str, Any]) -> set[str]:
    """Names of the namespace's pods the API server finds with ``peer_selector``'s matchLabels."""
    labels = peer_selector.get("matchLabels") or {}
    assert set(peer_selector) <= {"matchLabels"}, peer_selector  # the chart and the operator use matchLabels only
    found = core.list_namespaced_pod(namespace, label_selector=",".join(f"{k}={v}" for k, v in labels.items()))
    return {p.metadata.name for p in found.items}


def parked_pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod with these labels that never runs (bound to a node that does not exist)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "no-such-node", "containers": [{"name": "c", "image": "registry.invalid/none:0"}]},
    }


def test_the_policies_select_the_real_pods(
    cluster: Cluster,
    crds: None,
    helm: Any,
    namespace: str,
    operators: OperatorFactory,
    jobs: Jobs,
    redis_server: EmbeddedRedis,
    core: client.CoreV1Api,
) -> None:
    docs = render(helm, "--namespace", namespace)  # the defaults: Redis, TLS, NetworkPolicies on
    policies = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"rf-rolloutfleet-redis", "rf-rolloutfleet-operator"}
    items = list(policies.values())
    cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    env = {
        e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e
    }
    assert env["ROLLOUTFLEET_WORKER_NETWORK_POLICY"] == "1"
    operators.start(
        extra_env={
            k: v for k, v in env.items() if k in ("ROLLOUTFLEET_WORKER_NETWORK_POLICY", "ROLLOUTFLEET_REDIS_PEERS")
        }
    )
    jobs.create(job_manifest("net", redis_server.url, replicas=2, network={"egress": [EGRESS]}))
    wait_for(lambda: jobs.running("net", 2), 120, jobs.describe)
    workers = set(jobs.pods("net"))
    for name, labels in {
        "parked-operator": deployment["spec"]["template"]["metadata"]["labels"],
        "parked-redis": statefulset["spec"]["template"]["metadata"]["labels"],
        "parked-learner": {"rolloutfleet.io/learner": "true"},
        "parked-stranger": {"app.kubernetes.io/name": "rolloutfleet"},
    }.items():
        core.create_namespaced_pod(namespace, parked_pod(name, labels))

    # The job's own policy, written by the operator under its RBAC and owned by the job.
    written = json.loads(cluster.kubectl("-n", namespace, "get", "networkpolicy", "net-egress", "-o", "json").stdout)
    assert written["metadata"]["ownerReferences"][0]["uid"] == jobs.get("net")["metadata"]["uid"]
    assert selected(core, namespace, written["spec"]["podSelector"]) == workers
    dns, to_redis, own = written["spec"]["egress"]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")} and "to" not in dns
    assert to_redis["ports"] == [{"port": redis_server.port, "protocol": "TCP"}]
    (redis_peer,) = to_redis["to"]
    assert selected(core, namespace, redis_peer["podSelector"]) == {"parked-redis"}
    by_name = f"kubernetes.io/metadata.name={namespace}"  # the label the API server gives every namespace
    assert redis_peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    assert [n.metadata.name for n in core.list_namespace(label_selector=by_name).items] == [namespace]
    assert own == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 443, "protocol": "TCP"}]}

    # The chart's: Redis admits the operator, the workers and learners; nobody else.
    redis_policy = policies["rf-rolloutfleet-redis"]["spec"]
    assert selected(core, namespace, redis_policy["podSelector"]) == {"parked-redis"}
    (rule,) = redis_policy["ingress"]
    assert rule["ports"] == [{"port": 6379, "protocol": "TCP"}]
    admitted = [selected(core, namespace, peer["podSelector"]) for peer in rule["from"]]
    # The operator and learners of the release's namespace only; workers of every namespace (a job
    # without spec.redis uses the chart's Redis wherever it is), by default.
    assert [peer.get("namespaceSelector") for peer in rule["from"]] == [None, {}, None]
    assert admitted[0] == {"parked-operator"} and admitted[1] == workers and admitted[2] == {"parked-learner"}
    operator_policy = policies["rf-rolloutfleet-operator"]["spec"]
    assert selected(core, namespace, operator_policy["podSelector"]) == {"parked-operator"}

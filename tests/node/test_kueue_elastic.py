"""An elastic RolloutJob under the real Kueue, with real containers on the real node: the
chart's operator is Kueue's external framework, and Kueue runs with its
``ElasticJobsViaWorkloadSlices`` gate (hack/kueue/up.sh). Scaled past its quota, the job
keeps its running workers (same pods, no restart, no gap in their batches) while the new
one waits in Kueue's words; the new one starts when the quota grows; scaled down, the
quota goes back to the ClusterQueue.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
import redis

from rolloutfleet import BatchConsumer
from rolloutfleet.transport.entries import decode_entry
from rolloutfleet.transport.heartbeat import parse_heartbeats
from rolloutfleet.transport.redis.keys import job_keys
from tests.node.nodekit import Node, Seen, chart_redis, wait_for

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
            "preemption": {"withinClusterQueue": "LowerPriority"},
        },
    }  # fmt: skip


def job_manifest(name: str = JOB, replicas: int = 2, **redis: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
            "annotations": {"kueue.x-k8s.io/elastic-job": "true"},
        },
        "spec": {
            "replicas": replicas,
            "env": {"id": "CartPole-v1", "numEnvs": 2},
            "sampling": {"rolloutFragmentLength": 50, "seed": 0},
            # The chart's Redis (no url: the operator's default).
            "redis": redis or {"maxLen": 10000, "backpressure": "dropOldest"},
            "resources": WORKER,
        },
    }


def status(node: Node, job: str = JOB) -> dict[str, Any]:
    return (node.get(NS, "rj", job) or {}).get("status") or {}


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


def redis_url_and_password(node: Node) -> tuple[str, str]:
    return chart_redis(node, NS)


def consumer(node: Node) -> BatchConsumer:
    url, password = redis_url_and_password(node)
    return BatchConsumer(url, JOB, namespace=NS, group="node-test", password=password, block_s=0.5)


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


@pytest.mark.timeout(900)
def test_a_preempted_job_publishes_or_counts_every_row_it_sampled(node: Node) -> None:
    """Preempted by Kueue while no learner reads (its workers wait with a fragment in hand):
    the workers get their grace period, and every row they sampled is in the stream or
    counted as dropped in their last heartbeat; the preemption is one disruption."""
    node.kubectl("-n", NS, "delete", "rj", JOB, "--timeout=120s", timeout=130)
    victim = job_manifest("victim", 2, maxLen=4, backpressure="block", blockTimeoutSeconds=600)
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(victim))
    wait_for(lambda: status(node, "victim").get("readyReplicas") == 2, 300, lambda: node.diagnostics(NS))
    url, password = redis_url_and_password(node)
    client = redis.Redis.from_url(url, password=password)
    keys = job_keys(NS, "victim")
    # Full, nobody reading: both workers wait with a fragment in hand.
    wait_for(lambda: status(node, "victim").get("reason") == "WaitingForLearner", 180, lambda: node.diagnostics(NS))
    assert client.xlen(keys.batches) >= 4

    high = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"{QUEUE}-high"}, "value": 1000}  # fmt: skip
    node.kubectl("apply", "-f", "-", input=json.dumps(high))
    vip = job_manifest("vip", 3)
    vip["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = f"{QUEUE}-high"
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(vip))
    found = wait_for(
        lambda: (s := status(node, "victim")).get("phase") == "Queued" and s, 180, lambda: node.diagnostics(NS)
    )
    wait_for(lambda: not node.get(NS, "pods", "-l", "rolloutfleet.io/job=victim")["items"], 120)
    found = status(node, "victim")
    assert found["disruptions"]["Preempted"] == 1 and found.get("restarts", 0) == 0, found

    beats = parse_heartbeats(client.hgetall(keys.heartbeats))
    published: dict[int, int] = defaultdict(int)
    for _, fields in client.xrange(keys.batches):
        batch, metadata = decode_entry(fields)
        published[metadata.worker_index] += len(batch)
    for index in (0, 1):
        beat = beats[index]
        assert beat["rows_published"] == published[index], (index, beat, dict(published))
        assert beat["rows_sampled"] == beat["rows_published"] + beat["rows_dropped"], (index, beat)
    assert sum(beats[i]["rows_dropped"] for i in (0, 1)) > 0  # the fragments in hand were counted, not lost
    client.close()
    node.kubectl("-n", NS, "delete", "rj", "vip", "victim", "--timeout=120s", timeout=130)


TEAMS = ("team-a", "team-b")


def team_objects(team: str) -> list[dict[str, Any]]:
    """The worked example of docs/cluster-sharing-kueue.md: a namespace, a ClusterQueue with
    quota for two workers in cohort ``rl`` (it lends what it does not use and takes it back),
    and a LocalQueue ``queue``."""
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": team},
        "spec": {
            "cohortName": "rl",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": team}},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                "flavors": [{"name": QUEUE, "resources": quota(2)}]}],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        },
    }  # fmt: skip
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
             "metadata": {"name": "queue", "namespace": team}, "spec": {"clusterQueue": team}}  # fmt: skip
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}}, queue, local]


def team_job(team: str, replicas: int) -> dict[str, Any]:
    manifest = job_manifest("fleet", replicas)
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "queue"
    return manifest


def picture(node: Node) -> str:
    """What a platform engineer would look at: both teams' jobs and queues."""
    lines = []
    for team in TEAMS:
        lines.append(node.kubectl("-n", team, "get", "rj", check=False).strip())
    lines.append(node.kubectl("get", "clusterqueues", check=False).strip())
    return "\n".join(lines)


@pytest.mark.timeout(900)
def test_two_teams_lend_each_other_idle_quota_in_a_cohort(node: Node) -> None:
    """Team A's elastic fleet grows into team B's idle quota; when B submits a job, Kueue
    takes its quota back (A is preempted, and re-admitted at what its own quota holds)."""
    for team in TEAMS:
        for item in team_objects(team):
            node.kubectl("apply", "-f", "-", input=json.dumps(item))
    node.kubectl("-n", "team-a", "apply", "-f", "-", input=json.dumps(team_job("team-a", 4)))
    wait_for(lambda: status_in(node, "team-a").get("readyReplicas") == 4, 300, lambda: picture(node))
    print("\n--- team A borrows team B's idle quota ---\n" + picture(node))

    node.kubectl("-n", "team-b", "apply", "-f", "-", input=json.dumps(team_job("team-b", 2)))
    wait_for(lambda: status_in(node, "team-b").get("readyReplicas") == 2, 300, lambda: picture(node))
    found = wait_for(
        lambda: (s := status_in(node, "team-a")).get("readyReplicas") == 2 and s, 300, lambda: picture(node)
    )
    print("\n--- team B takes its quota back ---\n" + picture(node))
    assert found["disruptions"]["Preempted"] == 1, found["disruptions"]
    assert found["kueue"]["admittedReplicas"] == 2 and found["kueue"]["queuedWorkers"] == [2, 3], found["kueue"]
    assert found.get("restarts", 0) == 0

    node.kubectl("-n", "team-b", "delete", "rj", "fleet", "--timeout=120s", timeout=130)
    wait_for(lambda: status_in(node, "team-a").get("readyReplicas") == 4, 300, lambda: picture(node))
    print("\n--- team B done: team A borrows again ---\n" + picture(node))


def status_in(node: Node, team: str) -> dict[str, Any]:
    return (node.get(team, "rj", "fleet") or {}).get("status") or {}


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    for team in TEAMS:
        node.kubectl("-n", team, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
        node.kubectl("delete", "clusterqueue", team, "--ignore-not-found", "--wait=false", check=False)
        node.kubectl("delete", "namespace", team, "--ignore-not-found", "--wait=false", check=False)
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.kubectl("-n", NS, "delete", "localqueue", QUEUE, "--ignore-not-found", check=False)
    node.kubectl("delete", "clusterqueue", QUEUE, "--ignore-not-found", "--wait=false", check=False)
    # A flavor is kept (a finalizer) while a ClusterQueue names it: the queues go first.
    node.kubectl("delete", "resourceflavor", QUEUE, "--ignore-not-found", "--wait=false", check=False)
    node.kubectl("delete", "workloadpriorityclass", f"{QUEUE}-high", "--ignore-not-found", check=False)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)

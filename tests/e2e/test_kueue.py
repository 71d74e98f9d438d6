"""RolloutJobs queued by the real Kueue (v0.17.0, built from its pinned module and started
with the cluster by hack/kueue/up.sh) as the external framework RolloutJob.v1alpha1.rolloutfleet.io.

One ClusterQueue with quota for exactly one job's workers (2 x 250m CPU, 2 x 256Mi), a
LocalQueue, a ResourceFlavor with node labels and a toleration. What is asserted is what
the API server says: pods, the jobs' status, Kueue's Workloads.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import REPO, Cluster, OperatorFactory, missing, wait_for
from tests.e2e.jobs import Jobs, job_manifest
from tests.integration.fleet_helpers import STEP_S, StarvingLearner

KUEUE = ("kueue.x-k8s.io", "v1beta2")
WORKER = {"cpu": "250m", "memory": "256Mi"}
TOLERATION = {"key": "rolloutfleet.io/e2e-kueue", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def queue(cluster: Cluster, kubelet: LocalKubelet, namespace: str) -> Iterator[str]:
    """A LocalQueue (named like the namespace) over a ClusterQueue with room for one job."""
    if not (cluster.state / "kueue" / "env").exists():
        missing(f"Kueue is not running in the e2e cluster (hack/kueue/up.sh; {cluster.state}/kueue)")
    api = client.CustomObjectsApi(cluster.api())
    name = namespace
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"kubernetes.io/hostname": kubelet.node_name}, "tolerations": [TOLERATION]},
    }
    quota = [{"name": "cpu", "nominalQuota": "500m"}, {"name": "memory", "nominalQuota": "512Mi"}]
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory"], "flavors": [{"name": name, "resources": quota}]}
            ],
            "preemption": {"withinClusterQueue": "LowerPriority"},
        },
    }
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": name},
    }
    high = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"{name}-high"}, "value": 1000}  # fmt: skip
    api.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
    api.create_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)
    api.create_cluster_custom_object(*KUEUE, "workloadpriorityclasses", high)
    api.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local)
    yield name
    for plural in ("clusterqueues", "resourceflavors", "workloadpriorityclasses"):
        target = f"{name}-high" if plural == "workloadpriorityclasses" else name
        cluster.kubectl("delete", f"{plural}.kueue.x-k8s.io", target, "--wait=false", check=False)


def queued_job(name: str, redis_url: str, queue: str, priority: str | None = None) -> dict[str, Any]:
    manifest = job_manifest(name, redis_url, replicas=2, resources=WORKER)
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    manifest["metadata"]["labels"] = labels
    return manifest


def workloads(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    api = client.CustomObjectsApi(cluster.api())
    found = api.list_namespaced_custom_object(
        *KUEUE, namespace, "workloads", label_selector=f"rolloutfleet.io/job={job}"
    )
    return list(found["items"])


def pods_ready(cluster: Cluster, namespace: str, job: str) -> dict[str, Any] | None:
    for workload in workloads(cluster, namespace, job):
        for condition in (workload.get("status") or {}).get("conditions") or []:
            if condition["type"] == "PodsReady" and condition["status"] == "True":
                return dict(condition)
    return None


def queued(jobs: Jobs, name: str, *words: str) -> dict[str, Any] | None:
    status = jobs.status(name)
    if status.get("phase") == "Queued" and all(w in status.get("message", "") for w in words):
        return status
    return None


def test_kueue_admits_one_job_at_a_time_and_preempts_for_priority_without_counting_failures(
    cluster: Cluster,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
    queue: str,
) -> None:
    operators.start()
    jobs.create(queued_job("a", redis_server.url, queue))
    wait_for(lambda: jobs.running("a", 2), 90, jobs.describe)
    # A's workers carry the admitted flavor's node labels and toleration.
    for pod in jobs.pods("a").values():
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == "rolloutfleet-test-node", pod["spec"]
        assert any(t.get("key") == TOLERATION["key"] for t in pod["spec"].get("tolerations", [])), pod["spec"]
    (workload_a,) = workloads(cluster, namespace, "a")
    assert workload_a["spec"]["podSets"][0]["count"] == 2
    requests = workload_a["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == WORKER, requests
    assert workload_a["metadata"]["ownerReferences"][0]["kind"] == "RolloutJob"
    # PodsReady follows the workers (Kueue's waitForPodsReady reads it).
    ready = wait_for(lambda: pods_ready(cluster, namespace, "a"), 30, jobs.describe)
    assert (ready["status"], ready["reason"]) == ("True", "Started"), ready

    # B does not fit: it waits, in Kueue's words, without a pod.
    jobs.create(queued_job("b", redis_server.url, queue))
    status = wait_for(
        lambda: queued(jobs, "b", "couldn't assign flavors to pod set workers: insufficient"), 60, jobs.describe
    )
    assert not jobs.pods("b")

    # A deleted: its quota is released, B is admitted and runs.
    jobs.api.delete_namespaced_custom_object("rolloutfleet.io", "v1alpha1", namespace, "rolloutjobs", "a")
    wait_for(lambda: jobs.running("b", 2), 120, jobs.describe)
    assert jobs.status("b").get("restarts", 0) == 0

    # A higher-priority job preempts B: B's pods go, nothing is counted as a failure.
    jobs.create(queued_job("high", redis_server.url, queue, priority=f"{queue}-high"))
    wait_for(lambda: jobs.running("high", 2), 120, jobs.describe)
    status = wait_for(lambda: queued(jobs, "b"), 60, jobs.describe)
    live_b = [p for p in jobs.pods("b").values() if not p["metadata"].get("deletionTimestamp")]
    assert not live_b, live_b
    assert status.get("restarts", 0) == 0, status
    assert status["disruptions"]["Preempted"] == 1, status["disruptions"]  # Kueue's preemption, counted once
    (workload_high,) = workloads(cluster, namespace, "high")
    assert workload_high["spec"]["priority"] == 1000
    (workload_b,) = workloads(cluster, namespace, "b")
    types = {c["type"]: c for c in workload_b["status"]["conditions"]}
    assert types["QuotaReserved"]["status"] == "False" and types["Requeued"]["status"] == "True", types

    # The high one deleted: B resumes, still without a restart.
    jobs.api.delete_namespaced_custom_object("rolloutfleet.io", "v1alpha1", namespace, "rolloutjobs", "high")
    wait_for(lambda: jobs.running("b", 2), 120, jobs.describe)
    assert jobs.status("b").get("restarts", 0) == 0 and jobs.status("b")["disruptions"]["Preempted"] == 1


def test_kueue_missing_queue_waits_in_kueues_words_scale_requeues_suspend_releases_quota(
    cluster: Cluster,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
    queue: str,
) -> None:
    operators.start()
    jobs.create(queued_job("lost", redis_server.url, "no-such-queue"))
    status = wait_for(lambda: queued(jobs, "lost", "LocalQueue no-such-queue doesn't exist"), 60, jobs.describe)
    assert status["reason"] == "Inadmissible", status
    time.sleep(6)  # more than a timer period: still no pod
    assert not jobs.pods("lost")

    # Scaling an admitted job: its Workload is replaced (Kueue forbids resizing an admitted
    # one) and the job is admitted again at the new size, never running past its quota.
    jobs.create(queued_job("scaled", redis_server.url, queue))
    wait_for(lambda: jobs.running("scaled", 2), 90, jobs.describe)
    jobs.patch("scaled", {"replicas": 1})
    wait_for(lambda: jobs.running("scaled", 1), 90, jobs.describe)
    wait_for(lambda: [w["spec"]["podSets"][0]["count"] for w in workloads(cluster, namespace, "scaled")] == [1], 60)
    assert jobs.status("scaled").get("restarts", 0) == 0
    # Scaled past the quota: it waits, with no pod, in Kueue's words.
    jobs.patch("scaled", {"replicas": 3})
    wait_for(
        lambda: queued(jobs, "scaled", "couldn't assign flavors to pod set workers: insufficient"), 90, jobs.describe
    )
    wait_for(lambda: not jobs.pods("scaled"), 60, jobs.describe)

    # Suspended: no pod and no Workload (the quota is released); resumed: queued, admitted again.
    jobs.patch("scaled", {"replicas": 2, "suspend": True})
    wait_for(lambda: jobs.status("scaled").get("phase") == "Suspended", 60, jobs.describe)
    wait_for(lambda: not workloads(cluster, namespace, "scaled"), 60, jobs.describe)
    jobs.patch("scaled", {"suspend": False})
    wait_for(lambda: jobs.running("scaled", 2), 90, jobs.describe)
    assert jobs.status("scaled").get("restarts", 0) == 0


def test_kueue_down_means_no_pod_and_restarted_kueue_admits_the_waiting_job(
    cluster: Cluster,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
    queue: str,
) -> None:
    operators.start()
    subprocess.run([str(REPO / "hack/kueue/down.sh"), str(cluster.state)], check=True, timeout=60)
    try:
        jobs.create(queued_job("patient", redis_server.url, queue))
        # Kueue's webhook does not answer: no Workload, so no pod, and the job says why.
        status = wait_for(lambda: queued(jobs, "patient", "failed calling webhook"), 60, jobs.describe)
        assert status["reason"] == "WorkloadRefused", status
        time.sleep(6)  # more than a timer period
        assert not jobs.pods("patient")
    finally:
        up = subprocess.run(
            [str(REPO / "hack/kueue/up.sh"), str(cluster.state)], capture_output=True, text=True, timeout=300
        )
        assert up.returncode == 0, up.stderr[-3000:]
    wait_for(lambda: jobs.running("patient", 2), 120, jobs.describe)
    assert len(workloads(cluster, namespace, "patient")) == 1


def elastic_job(name: str, redis_url: str, queue: str, replicas: int) -> dict[str, Any]:
    manifest = queued_job(name, redis_url, queue)
    manifest["spec"]["replicas"] = replicas
    manifest["metadata"]["annotations"] = {"kueue.x-k8s.io/elastic-job": "true"}
    return manifest


def uids(jobs: Jobs, name: str) -> dict[str, str]:
    """Live pods of job ``name``: pod name -> UID."""
    return {n: p["metadata"]["uid"] for n, p in jobs.pods(name).items() if not p["metadata"].get("deletionTimestamp")}


def live_slices(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    def finished(w: dict[str, Any]) -> bool:
        return any(
            c["type"] == "Finished" and c["status"] == "True" for c in (w.get("status") or {}).get("conditions") or []
        )

    return [
        w for w in workloads(cluster, namespace, job) if not finished(w) and not w["metadata"].get("deletionTimestamp")
    ]


def slices_seen(cluster: Cluster, namespace: str, job: str) -> str:
    """The job's Workloads in a line each: name, count (minCount), admitted count, conditions."""
    lines = []
    for w in workloads(cluster, namespace, job):
        pod_set, status = w["spec"]["podSets"][0], w.get("status") or {}
        admitted = [a.get("count") for a in (status.get("admission") or {}).get("podSetAssignments") or []]
        conditions = [f"{c['type']}={c['status']}" for c in status.get("conditions") or []]
        lines.append(f"{w['metadata']['name']} count={pod_set['count']} min={pod_set.get('minCount')} "
                     f"admitted={admitted} {' '.join(conditions)}")  # fmt: skip
    return "\n".join(lines)


def queued_batch_job(cluster: Cluster, namespace: str, name: str, queue: str) -> None:
    """A plain batch/v1 Job in the same queue (Kueue's own integration): one pod of the
    workers' size that sleeps. It shares no port with the workers the test kubelet runs."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "sleep", "image": "busybox", "command": ["sleep", "600"],
                                    "resources": {"requests": WORKER, "limits": WORKER}}],
                }
            },
        },
    }  # fmt: skip
    client.BatchV1Api(cluster.api()).create_namespaced_job(namespace, job)


def batch_job_running(cluster: Cluster, namespace: str, name: str) -> bool:
    pods = client.CoreV1Api(cluster.api()).list_namespaced_pod(namespace, label_selector=f"job-name={name}").items
    return any(p.status.phase == "Running" and not p.metadata.deletion_timestamp for p in pods)


def delete_batch_job(cluster: Cluster, namespace: str, name: str) -> None:
    client.BatchV1Api(cluster.api()).delete_namespaced_job(name, namespace, propagation_policy="Background")


def reserved_cpu(cluster: Cluster, queue: str) -> str:
    """The CPU the ClusterQueue has reserved, as Kueue reports it."""
    found = client.CustomObjectsApi(cluster.api()).get_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    for flavor in (found.get("status") or {}).get("flavorsReservation") or []:
        for resource in flavor["resources"]:
            if resource["name"] == "cpu":
                return str(resource["total"])
    return "0"


def test_an_elastic_job_grows_and_shrinks_inside_kueue_without_stopping_its_workers(
    cluster: Cluster,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
    queue: str,
) -> None:
    operators.start()
    jobs.create(elastic_job("grow", redis_server.url, queue, replicas=1))
    wait_for(lambda: jobs.running("grow", 1), 90, jobs.describe)
    first = uids(jobs, "grow")
    wait_for(lambda: reserved_cpu(cluster, queue) == "250m", 30, jobs.describe)

    # 1 -> 2: a replacement slice is admitted for the difference; worker 0 never stops.
    jobs.patch("grow", {"replicas": 2})
    wait_for(lambda: jobs.running("grow", 2), 90, jobs.describe)
    assert first.items() <= uids(jobs, "grow").items(), (first, uids(jobs, "grow"))
    (current,) = wait_for(lambda: (found := live_slices(cluster, namespace, "grow")) and len(found) == 1 and found, 60)
    assert current["spec"]["podSets"][0]["count"] == 2
    assert current["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"].endswith("-1")
    wait_for(lambda: len(workloads(cluster, namespace, "grow")) == 1, 60)  # the replaced slice is deleted
    two = uids(jobs, "grow")

    # 2 -> 3 past the quota: the two keep running; the third waits, in Kueue's words.
    jobs.patch("grow", {"replicas": 3})

    def third_waits() -> dict[str, Any] | None:
        status = jobs.status("grow")
        kueue = status.get("kueue") or {}
        waits = kueue.get("queuedWorkers") == [2] and "insufficient" in (kueue.get("message") or "")
        return status if waits and status.get("phase") == "Running" else None

    status = wait_for(third_waits, 60, jobs.describe)
    assert status["phase"] == "Running" and status["reason"] == "ScaleUpQueued", status
    assert "1 more worker(s) wait for Kueue" in status["message"], status["message"]
    time.sleep(6)  # more than a timer period: still the same two workers, no third
    assert uids(jobs, "grow") == two and jobs.status("grow").get("restarts", 0) == 0
    assert reserved_cpu(cluster, queue) == "500m"

    # A job queued behind it gets the quota the elastic job gives back when it shrinks to 1.
    queued_batch_job(cluster, namespace, "behind", queue)
    time.sleep(3)
    assert not batch_job_running(cluster, namespace, "behind")  # no room while the fleet holds 2
    jobs.patch("grow", {"replicas": 1})
    wait_for(lambda: batch_job_running(cluster, namespace, "behind"), 90, jobs.describe)
    wait_for(lambda: jobs.running("grow", 1), 60, jobs.describe)
    assert first.items() <= uids(jobs, "grow").items()  # worker 0 is still the first pod
    (current,) = live_slices(cluster, namespace, "grow")
    assert current["spec"]["podSets"][0]["count"] == 1
    assert jobs.status("grow")["kueue"]["queuedWorkers"] == [] and jobs.status("grow").get("restarts", 0) == 0


def test_an_autoscaled_elastic_job_asks_kueue_for_what_it_wants_and_runs_what_it_was_given(
    cluster: Cluster,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
    queue: str,
) -> None:
    """Quota for two workers; a starving learner makes the autoscaler want more. The job runs
    two and says the rest wait; without a learner it goes to 0 and holds no quota, so a job
    queued behind it runs; the learner back, it runs the one worker that fits, and grows to
    3 when the other job goes and the queue grows, without stopping the worker it has."""
    operators.start()
    manifest = elastic_job("fleet", redis_server.url, queue, replicas=1)
    manifest["spec"].update(
        sampling={"rolloutFragmentLength": 20, "seed": 0},
        redis={"url": redis_server.url, "maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
        autoscaling={"minReplicas": 0, "maxReplicas": 4, "idleSeconds": 20, "windowSeconds": 10,
                     "scaleDownSeconds": 10},
        env={"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": STEP_S}},
        extraEnv=[{"name": "PYTHONPATH", "value": str(REPO)}],
    )  # fmt: skip
    jobs.create(manifest)
    wait_for(lambda: jobs.running("fleet", 1), 120, jobs.describe)
    learner = StarvingLearner(redis_server.url, "fleet", "first", namespace)
    learner.start()

    def capped() -> dict[str, Any] | None:
        status = jobs.status("fleet")
        queued_workers = (status.get("kueue") or {}).get("queuedWorkers") or []
        return status if queued_workers and status.get("readyReplicas") == 2 else None

    status = wait_for(capped, 180, jobs.describe)
    assert status["kueue"]["admittedReplicas"] == 2 and status["desiredReplicas"] == 2, status["kueue"]
    assert status["autoscaling"]["reason"].startswith("learner starved "), status["autoscaling"]
    asked = []
    for _ in range(10):  # never more pods than admitted; the ask changes at most once a window
        assert len(uids(jobs, "fleet")) <= 2
        asked.append(len(jobs.status("fleet")["kueue"]["queuedWorkers"]))
        time.sleep(1.0)
    assert sum(1 for a, b in itertools.pairwise(asked) if a != b) <= 2, asked
    assert reserved_cpu(cluster, queue) == "500m"

    # No learner: 0 workers and no quota held; a job queued behind it runs.
    learner.stop.set()
    learner.join(10)
    wait_for(lambda: jobs.status("fleet").get("desiredReplicas") == 0 and not uids(jobs, "fleet"), 120, jobs.describe)
    wait_for(lambda: reserved_cpu(cluster, queue) in ("0", "0m"), 60, lambda: slices_seen(cluster, namespace, "fleet"))
    queued_batch_job(cluster, namespace, "behind", queue)
    wait_for(lambda: batch_job_running(cluster, namespace, "behind"), 90, jobs.describe)

    # The learner back: the fleet asks again and runs the one worker that fits, saying why not more.
    again = StarvingLearner(redis_server.url, "fleet", "second", namespace)
    again.start()

    def one_fits() -> dict[str, Any] | None:
        status = jobs.status("fleet")
        kueue = status.get("kueue") or {}
        says = "insufficient" in (kueue.get("message") or "")
        return status if kueue.get("admittedReplicas") == 1 and says and jobs.running("fleet", 1) else None

    wait_for(one_fits, 120, jobs.describe)
    only = uids(jobs, "fleet")
    wait_for(lambda: again.batches > 0, 120, jobs.describe)

    # The other job goes and the queue grows by one worker: the fleet grows from 1 to 3
    # around the worker it has.
    delete_batch_job(cluster, namespace, "behind")
    more = [{"name": "cpu", "nominalQuota": "750m"}, {"name": "memory", "nominalQuota": "768Mi"}]
    api = client.CustomObjectsApi(cluster.api())
    found = api.get_cluster_custom_object(*KUEUE, "clusterqueues", queue)
    found["spec"]["resourceGroups"][0]["flavors"][0]["resources"] = more
    api.replace_cluster_custom_object(*KUEUE, "clusterqueues", queue, found)
    wait_for(lambda: jobs.running("fleet", 3), 120, jobs.describe)
    assert only.items() <= uids(jobs, "fleet").items(), (only, uids(jobs, "fleet"))
    assert jobs.status("fleet").get("restarts", 0) == 0
    again.stop.set()
    again.join(10)

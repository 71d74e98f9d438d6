"""The operator against what the test kubelet makes real: scheduling and graceful deletion.

Scenarios that ``test_operator.py`` (issue 6's 1-8) does not cover and that only a
kubelet which schedules by resources and stops processes gracefully can show: a job that
asks for more GPUs than the node has, and a worker pod deleted by hand.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, pod_json, wait_for
from tests.e2e.jobs import Jobs, job_manifest, read_batches


def scheduled_false(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), None)


def test_a_job_asking_for_more_gpus_than_the_node_has_waits_without_spending_restarts(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    assert kubelet.gpus == 1
    operators.start()
    jobs.create(job_manifest("greedy", redis_server.url, replicas=1, resources={"gpu": 2}))
    condition = wait_for(lambda: scheduled_false(pod_json(cluster, namespace, "greedy-worker-0")), 60, jobs.describe)
    assert condition["reason"] == "Unschedulable" and "nvidia.com/gpu" in condition["message"]
    pod = pod_json(cluster, namespace, "greedy-worker-0")
    assert pod is not None and pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"

    time.sleep(6)  # more than one operator timer period (5 s): a Pending pod is not a failure
    status = jobs.status("greedy")
    assert status.get("restarts", 0) == 0 and status.get("phase") == "Pending", status
    # The job says why, in the scheduler's words.
    assert status.get("reason") == "Unschedulable", status
    assert "worker(s) 0 waiting: Unschedulable:" in status["message"] and "nvidia.com/gpu" in status["message"], status
    assert not status.get("readyReplicas")
    assert list(jobs.pods("greedy")) == ["greedy-worker-0"]  # no duplicate, no churn

    # Asking for what the node has: the stale Pending pod is replaced and the worker runs.
    jobs.patch("greedy", {"resources": {"gpu": 1}})

    def runs_with_one_gpu() -> bool:
        pods = jobs.pods("greedy")
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        return (
            len(live) == 1
            and live[0]["status"].get("phase") == "Running"
            and live[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        )

    wait_for(runs_with_one_gpu, 60, jobs.describe)
    read_batches(redis_server.url, "greedy", namespace, {0})
    assert jobs.status("greedy").get("restarts", 0) == 0


def test_a_worker_pod_deleted_by_hand_stops_gracefully_and_is_replaced(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    jobs.create(job_manifest("handed", redis_server.url, replicas=1))
    wait_for(lambda: jobs.running("handed", 1), 60, jobs.describe)
    first = read_batches(redis_server.url, "handed", namespace, {0})
    old = jobs.pods("handed")["handed-worker-0"]
    pid = kubelet.pid(namespace, "handed-worker-0")
    assert pid is not None

    started = time.monotonic()
    cluster.kubectl("-n", namespace, "delete", "pod", "handed-worker-0", "--wait=false")

    def old_gone() -> bool:
        pod = jobs.pods("handed").get("handed-worker-0")
        return pod is None or pod["metadata"]["uid"] != old["metadata"]["uid"]

    wait_for(old_gone, 30, jobs.describe)
    # SIGTERM made the worker drain and exit by itself within the 5 s grace period
    # (ROLLOUTFLEET_GRACE_SECONDS in the fixture): no SIGKILL, its exit code its own.
    ended = [e for e in kubelet.exits(namespace, "handed-worker-0") if e["uid"] == old["metadata"]["uid"]]
    assert len(ended) == 1 and "signal" not in ended[0] and ended[0]["exitCode"] == 0, ended
    assert time.monotonic() - started < 5
    assert not os.path.exists(f"/proc/{pid}")  # exited and reaped before the final delete

    def replaced() -> bool:
        pod = jobs.pods("handed").get("handed-worker-0")
        return bool(
            pod
            and pod["metadata"]["uid"] != old["metadata"]["uid"]
            and pod["status"].get("phase") == "Running"
            and not pod["metadata"].get("deletionTimestamp")
        )

    wait_for(replaced, 60, jobs.describe)
    assert kubelet.pid(namespace, "handed-worker-0") != pid
    read_batches(redis_server.url, "handed", namespace, {0}, old=frozenset(first))

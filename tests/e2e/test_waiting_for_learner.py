"""A fleet with no learner on a real API server (issue 25, item 1): every worker pod Ready
by its own /readyz, the job Running with ``WaitingForLearner`` in its status and in
``kubectl get rj``; a worker killed meanwhile comes back Ready; a learner ends the wait."""

from __future__ import annotations

import signal
from typing import Any

import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.transport.redis.keys import job_keys
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest, read_batches


def waiting_condition(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "WaitingForLearner"), None)


def test_a_job_with_no_learner_is_ready_and_waiting_for_a_learner(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    # The chart example's backpressure (block), a stream that fills at once, and timeouts
    # short enough to have run out many times over while the test looks.
    blocking = {"maxLen": 4, "backpressure": "block", "blockTimeoutSeconds": 2}
    jobs.create(job_manifest("idle", redis_server.url, replicas=2, redis=blocking))
    stream = job_keys(namespace, "idle").batches
    client = redis.Redis.from_url(redis_server.url)

    def waiting_and_ready() -> dict[str, Any] | None:
        status = jobs.status("idle")
        condition = waiting_condition(status)
        ok = status.get("readyReplicas") == 2 and condition is not None and condition["status"] == "True"
        return status if ok and "2/2 workers waiting" in condition["message"] else None

    status = wait_for(waiting_and_ready, 120, jobs.describe)
    assert (status["phase"], status["reason"], status["replicas"], status["restarts"]) == (
        "Running",
        "WaitingForLearner",
        2,
        0,
    )
    condition = waiting_condition(status)
    assert condition is not None
    assert condition["reason"] == "WaitingForLearner"
    assert f"2/2 workers waiting for a learner to read {stream} since " in condition["message"]
    assert condition["message"].endswith(condition["lastTransitionTime"])  # since when, in both
    # Full, nothing dropped; two producers may each overshoot maxLen by one entry (the publisher's doc).
    held = client.xlen(stream)
    assert 4 <= held <= 6
    for pod in jobs.pods("idle").values():  # Ready by the kubelet's own probe of /readyz
        assert any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])
    table = cluster.kubectl("-n", namespace, "get", "rj", "idle").stdout.splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "READY", "PHASE", "RESTARTS", "STEPS/S", "REASON", "AGE"]
    assert table[1].split()[:4] == ["idle", "2", "2", "Running"] and "WaitingForLearner" in table[1].split()

    # A worker killed while the stream is full: its replacement is Ready without publishing.
    old_uid = jobs.pods("idle")["idle-worker-0"]["metadata"]["uid"]
    kubelet.kill(namespace, "idle-worker-0", signal.SIGKILL)

    def replaced_and_ready() -> dict[str, Any] | None:
        pod = jobs.pods("idle").get("idle-worker-0")
        if pod is None or pod["metadata"]["uid"] == old_uid:
            return None
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])
        status = jobs.status("idle")
        return status if ready and status.get("readyReplicas") == 2 and status.get("restarts") == 1 else None

    wait_for(replaced_and_ready, 120, jobs.describe)
    assert client.xlen(stream) == held
    wait_for(lambda: "2/2 workers waiting" in jobs.status("idle")["message"], 60, jobs.describe)
    since = waiting_condition(jobs.status("idle"))
    assert since is not None and since["lastTransitionTime"] == condition["lastTransitionTime"]  # one wait

    # A learner reads: the wait ends, the job's reason is its usual one again.
    read_batches(redis_server.url, "idle", namespace, {0, 1})

    def learner_came() -> dict[str, Any] | None:
        status = jobs.status("idle")
        ended = waiting_condition(status)
        ok = ended is not None and ended["status"] == "False" and status.get("reason") == "AllWorkersReady"
        return status if ok else None

    status = wait_for(learner_came, 60, jobs.describe)
    assert status["readyReplicas"] == 2 and status["phase"] == "Running"
    ended = waiting_condition(status)
    assert ended is not None and ended["reason"] == "NotWaiting"

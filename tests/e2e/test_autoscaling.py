"""``spec.autoscaling`` on a real API server with the test kubelet's worker processes and a
real Redis: a learner consuming at a fixed rate makes the job settle at the size that
feeds it (±1) without flapping, said in the status, an Event per change and ``kubectl get
-o wide``; slowing down shrinks it; the learner gone, the job goes to minReplicas (0) after idleSeconds, its pods
removed gracefully (no restart, no disruption counted); a learner back brings workers back
at the operator's next look, and it gets batches."""

from __future__ import annotations

import itertools
import math
import re
import time
from typing import Any

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import REPO, Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest
from tests.integration.fleet_helpers import APPETITE, STEP_S, StarvingLearner


def scaled_events(cluster: Cluster, namespace: str) -> list[str]:
    result = cluster.kubectl(
        "-n", namespace, "get", "events", "--field-selector", "reason=Scaled", "-o",
        "jsonpath={range .items[*]}{.message}{'\\n'}{end}",
    )  # fmt: skip
    return [line for line in result.stdout.splitlines() if line]


def test_the_job_follows_its_learner_settles_goes_to_zero_and_comes_back(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    manifest = job_manifest(
        "elastic",
        redis_server.url,
        replicas=1,
        sampling={"rolloutFragmentLength": 20},
        redis={"maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
        autoscaling={"minReplicas": 0, "maxReplicas": 6, "idleSeconds": 20, "windowSeconds": 10,
                     "scaleDownSeconds": 10},
    )  # fmt: skip
    manifest["spec"]["env"] = {"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": STEP_S}}
    manifest["spec"]["extraEnv"] = [{"name": "PYTHONPATH", "value": str(REPO)}]  # the env's module is in tests/
    jobs.create(manifest)
    wait_for(lambda: jobs.status("elastic").get("readyReplicas") == 1, 120, jobs.describe)
    learner = StarvingLearner(redis_server.url, "elastic", "first", namespace)
    learner.start()

    # Up while the learner starves.
    def grown() -> dict[str, Any] | None:
        status = jobs.status("elastic")
        return status if (status.get("desiredReplicas") or 0) > 1 else None

    status = wait_for(grown, 180, jobs.describe)
    assert status["autoscaling"]["reason"].startswith("learner starved ") and "1 -> " in status["autoscaling"]["reason"]

    # Settled: the size that feeds it (±1) by the workers' own speed, without flapping.
    wait_for(lambda: jobs.status("elastic").get("readyReplicas") == jobs.status("elastic")["desiredReplicas"], 120,
             jobs.describe)  # fmt: skip
    sizes = []
    for _ in range(30):
        sizes.append(jobs.status("elastic")["desiredReplicas"])
        time.sleep(2.0)
    status = jobs.status("elastic")
    per_worker = status["autoscaling"]["workerRowsPerSecond"]
    assert per_worker, status["autoscaling"]
    ideal = math.ceil(APPETITE * 1.1 / per_worker)
    assert abs(sizes[-1] - ideal) <= 1, (sizes, status["autoscaling"])
    assert sum(1 for a, b in itertools.pairwise(sizes) if a != b) <= 1, sizes
    wide = cluster.kubectl("-n", namespace, "get", "rj", "elastic", "-o", "wide").stdout.splitlines()
    assert "AUTOSCALING" in wide[0].split()  # EVAL follows it; the reason's words do not move between reads
    assert any(words in wide[1] for words in ("workers blocked", "learner starved", "measuring", "waiting for")), wide
    events = scaled_events(cluster, namespace)
    assert events and events[0].startswith("learner starved ") and "1 -> " in events[0]

    # The learner slows to a quarter: the job shrinks (workers blocked), gracefully.
    settled = sizes[-1]
    learner.appetite = APPETITE / 4

    def shrunk() -> dict[str, Any] | None:
        status = jobs.status("elastic")
        return status if status["desiredReplicas"] < settled else None

    status = wait_for(shrunk, 180, jobs.describe)
    assert status["autoscaling"]["reason"].startswith("workers blocked "), status["autoscaling"]
    wait_for(lambda: len(jobs.pods("elastic")) == jobs.status("elastic")["desiredReplicas"], 120, jobs.describe)
    assert jobs.status("elastic")["restarts"] == 0

    # The learner stops: minReplicas (0) after idleSeconds; pods removed, no restart, no disruption.
    # The size to wake to is the largest the fleet had while the learner read (every size it was
    # scaled to is one the rule recommended), not the slow phase's it has now.
    largest = max(
        int(m.group(1)) for e in scaled_events(cluster, namespace) if (m := re.search(r"-> (\d+) workers$", e))
    )
    learner.stop.set()
    learner.join(10)
    active = jobs.status("elastic")["desiredReplicas"]
    assert largest > active, (largest, active)
    status = wait_for(lambda: (s := jobs.status("elastic")).get("desiredReplicas") == 0 and s, 120, jobs.describe)
    assert status["autoscaling"]["reason"].startswith("no learner has read for ")
    assert status["autoscaling"]["lastActiveReplicas"] == largest
    wait_for(lambda: not jobs.pods("elastic"), 120, jobs.describe)
    status = jobs.status("elastic")
    assert status["restarts"] == 0 and not any(status["disruptions"].values()), status
    assert any(e.startswith("no learner has read for ") and e.endswith(f"{active} -> 0 workers")
               for e in scaled_events(cluster, namespace))  # fmt: skip

    # A learner starts again: workers back at the operator's next look, and batches.
    again = StarvingLearner(redis_server.url, "elastic", "second", namespace)
    again.start()
    status = wait_for(lambda: ((s := jobs.status("elastic")).get("desiredReplicas") or 0) > 0 and s, 60, jobs.describe)
    assert status["autoscaling"]["reason"].startswith("a learner reads again (")
    assert status["autoscaling"]["reason"].endswith(f"0 -> {largest} workers")
    wait_for(lambda: again.batches > 0, 180, jobs.describe)
    again.stop.set()
    again.join(10)

"""``spec.autoscaling`` with the local fleet (what ``rolloutfleet run`` does), real worker
processes and a real redis-server: a learner consuming at a fixed rate makes the fleet
settle at the size that feeds it (±1) without flapping; slowing down shrinks it; the
learner gone, the fleet goes to minReplicas (0) after idleSeconds; the learner back,
workers come back at the next look (the largest size of its last run) and it gets its batches."""

from __future__ import annotations

import itertools
import math
import time

import pytest

from rolloutfleet.fleet.local_autoscaler import LocalAutoscaler
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob
from tests.integration.fleet_helpers import APPETITE, STEP_S, StarvingLearner

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def elastic_job() -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "elastic"},
            "spec": {
                "replicas": 1,
                "env": {"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": STEP_S}},
                "sampling": {"rolloutFragmentLength": 20},
                "redis": {"maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
                "autoscaling": {"minReplicas": 0, "maxReplicas": 8, "idleSeconds": 10, "windowSeconds": 8,
                                "scaleDownSeconds": 8},
            },
        }
    )  # fmt: skip


def looks(fleet: LocalFleet, scaler: LocalAutoscaler, until, limit: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Let the autoscaler look (once a second) until ``until()``; the decisions' reasons."""
    reasons: list[str] = []
    for _ in range(limit):
        fleet.poll()
        scaler.tick()
        assert scaler.decision is not None
        reasons.append(f"{len(fleet.workers)} {scaler.decision.reason}")
        if until():
            return reasons
        time.sleep(1.0)
    raise AssertionError(f"not within {limit} looks: {reasons[-8:]}")


def test_the_fleet_follows_a_learner_settles_goes_to_zero_and_comes_back(redis_url: str) -> None:
    fleet = LocalFleet(elastic_job(), redis_url=redis_url, grace_seconds=10)
    learner = StarvingLearner(redis_url, "elastic", "first")
    with fleet:
        scaler = LocalAutoscaler(fleet, look_s=0.0)
        learner.start()
        # Up: the learner starves with one worker; the fleet grows to what feeds it.
        reasons = looks(fleet, scaler, lambda: len(fleet.workers) > 1, 60)
        assert "learner starved" in reasons[-1] and "1 -> " in reasons[-1]
        # Settled: the size that feeds it (±1), measured by the workers' own speed; no flapping.
        sizes: list[int] = []
        for _ in range(40):
            fleet.poll()
            scaler.tick()
            sizes.append(len(fleet.workers))
            time.sleep(1.0)
        decision = scaler.decision
        assert decision is not None and decision.worker_rows_per_s
        ideal = math.ceil(APPETITE * 1.1 / decision.worker_rows_per_s)
        print(f"settled: sizes {sizes}, ideal {ideal}, last decision {decision}")  # shown with -s
        assert abs(sizes[-1] - ideal) <= 1, (sizes, decision)
        changes = sum(1 for a, b in itertools.pairwise(sizes) if a != b)
        assert changes <= 1, sizes
        assert learner.batches > 20

        # The learner slows down: the fleet shrinks to what feeds it now.
        settled = largest = len(fleet.workers)
        largest = max([largest, *sizes])
        learner.appetite = APPETITE / 4
        reasons = looks(fleet, scaler, lambda: len(fleet.workers) < settled, 90)
        largest = max([largest, *(int(r.split(" ", 1)[0]) for r in reasons[:-1])])
        assert reasons[-1].split(" ", 1)[1].startswith("workers blocked "), reasons[-1]
        # The next judged decision (after the new size's window) has the figures to check it by.
        looks(fleet, scaler, lambda: scaler.decision is not None and scaler.decision.worker_rows_per_s is not None, 60)
        slow = scaler.decision
        assert slow is not None and slow.worker_rows_per_s
        assert len(fleet.workers) <= math.ceil(APPETITE / 4 * 1.1 / slow.worker_rows_per_s) + 1, reasons
        assert fleet.restarts == 0

        # The learner stops: after idleSeconds without a read, no workers.
        before = len(fleet.workers)
        learner.stop.set()
        learner.join(10)
        reasons = looks(fleet, scaler, lambda: len(fleet.workers) == 0, 60)
        assert reasons[-1].startswith("0 no learner has read for 1"), reasons[-1]
        assert "(idleSeconds 10)" in reasons[-1] and fleet.restarts == 0  # removals are no failures
        active = scaler.autoscaler.last_active
        assert active == largest > before >= 1  # the largest size while it read, not the slow phase's

        # A learner starts again: the next look brings the workers back, and it gets its batches.
        again = StarvingLearner(redis_url, "elastic", "second")
        again.start()
        reasons = looks(fleet, scaler, lambda: len(fleet.workers) > 0, 10)
        assert len(reasons) <= 3, reasons  # the first looks after its first read
        assert "a learner reads again" in reasons[-1] and f"0 -> {active} workers" in reasons[-1]
        looks(fleet, scaler, lambda: again.batches > 0, 120)
        again.stop.set()
        again.join(10)

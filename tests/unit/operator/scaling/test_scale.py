"""The autoscaler's state in the operator: where it starts from, kubectl scale, edited
bounds, and what it writes in the status (pure)."""

from __future__ import annotations

from typing import Any

from rolloutfleet.rules.autoscale_signals import Signals
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.scaling.scale import scaling_status, sync_scaling


def job(replicas: int = 2, **autoscaling: Any) -> RolloutJob:
    spec = {"env": {"id": "CartPole-v1"}, "replicas": replicas}
    if autoscaling:
        spec["autoscaling"] = autoscaling
    return RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": spec})


def test_without_autoscaling_there_is_nothing_and_the_status_field_is_cleared() -> None:
    assert sync_scaling(None, job(), {}, 0.0) is None
    assert scaling_status(None) == {"autoscaling": None}  # a merge patch removes what an earlier spec left


def test_a_new_job_starts_from_spec_replicas_clamped() -> None:
    scaling = sync_scaling(None, job(9, maxReplicas=4), {}, 0.0)
    assert scaling is not None and scaling.autoscaler.replicas == 4
    status = scaling_status(scaling)["autoscaling"]
    assert status["reason"] == "starting: 4 workers" and status["lastActiveReplicas"] == 0
    assert status["lastScaleTime"] is None and status["learnerStarvedRatio"] is None


def test_a_restarted_operator_starts_from_the_status_its_predecessor_wrote() -> None:
    stored = {"desiredReplicas": 0, "autoscaling": {"reason": "no learner ...", "lastActiveReplicas": 6}}
    scaling = sync_scaling(None, job(2, maxReplicas=8), stored, 0.0)
    assert scaling is not None and (scaling.autoscaler.replicas, scaling.autoscaler.last_active) == (0, 6)
    # ... and a learner reading brings the 6 back
    scaling.autoscaler.observe(Signals(now=0.0), 0.0)
    decision = scaling.autoscaler.observe(Signals(now=1.0, last_read_age_s=400.0), 1.0)
    assert decision.replicas == 0
    decision = scaling.autoscaler.observe(Signals(now=2.0, last_read_age_s=0.5), 2.0)
    assert (decision.previous, decision.replicas) == (0, 6)


def test_kubectl_scale_is_a_nudge_the_autoscaler_starts_again_from() -> None:
    scaling = sync_scaling(None, job(2, maxReplicas=5), {}, 0.0)
    scaling = sync_scaling(scaling, job(7, maxReplicas=5), {}, 10.0)
    assert scaling is not None and scaling.autoscaler.replicas == 5 and scaling.spec_replicas == 7
    assert scaling.decision is not None and scaling.decision.changed
    assert scaling.decision.reason == (
        "spec.replicas set to 7 (kubectl scale?): starting again from 5 workers: 2 -> 5 workers"
    )
    again = sync_scaling(scaling, job(7, maxReplicas=5), {}, 11.0)
    assert again is scaling and again.decision is scaling.decision  # seen once


def test_edited_bounds_keep_the_size_within_them() -> None:
    scaling = sync_scaling(None, job(4, maxReplicas=8), {}, 0.0)
    scaling = sync_scaling(scaling, job(4, maxReplicas=3), {}, 1.0)
    assert scaling is not None and scaling.autoscaler.replicas == 3 and scaling.autoscaler.spec.max_replicas == 3

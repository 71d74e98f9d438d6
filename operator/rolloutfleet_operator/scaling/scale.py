"""The autoscaler's state for one job, kept across reconciles, and what it puts in the
job's status. Pure: the signals are read and the Events posted by :mod:`.autoscale_tick`.

With ``spec.autoscaling`` the operator keeps ``status.desiredReplicas`` workers: the
autoscaler's size (:mod:`rolloutfleet.rules.autoscaler`). It starts from the status a previous
operator wrote (``desiredReplicas``, ``autoscaling.lastActiveReplicas``), else from
``spec.replicas``; a later change of ``spec.replicas`` (``kubectl scale``, an HPA) is a
one-off nudge it starts again from (clamped to the bounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rolloutfleet.rules.autoscaler import Autoscaler, Decision
from rolloutfleet.spec.job import RolloutJob


@dataclass
class Scaling:
    """One autoscaled job's autoscaler and what the operator said about it."""

    autoscaler: Autoscaler
    spec_replicas: int
    """``spec.replicas`` when last seen: a change is a ``kubectl scale``."""
    decision: Decision | None = None
    announced: Decision | None = None
    """The last decision said in an Event and the log (each change is said once)."""
    last_scale_time: float | None = None
    """Unix time of the last change."""


def sync_scaling(scaling: Scaling | None, job: RolloutJob, status: Mapping[str, Any], now: float) -> Scaling | None:
    """The job's :class:`Scaling`, made or brought in line with its spec; None without
    ``spec.autoscaling``. ``now``: the autoscaler's clock (monotonic)."""
    spec, replicas = job.spec.autoscaling, job.spec.replicas
    if spec is None:
        return None
    if scaling is None:
        stored = status.get("autoscaling") or {}
        desired = status.get("desiredReplicas")
        start = int(desired) if isinstance(desired, int) and stored else replicas
        last_active = stored.get("lastActiveReplicas") or None
        return Scaling(Autoscaler(spec, start, last_active), replicas)
    if scaling.autoscaler.spec != spec:  # bounds or pace edited: the same size, within the new bounds
        old = scaling.autoscaler
        scaling.autoscaler = Autoscaler(spec, old.replicas, old.last_active)
    if scaling.spec_replicas != replicas:
        previous = scaling.autoscaler.replicas
        scaling.autoscaler.resize(replicas, now)
        scaling.spec_replicas = replicas
        size = scaling.autoscaler.replicas
        why = f"spec.replicas set to {replicas} (kubectl scale?): starting again from {size} workers"
        scaling.decision = Decision(size, previous, why if previous == size else f"{why}: {previous} -> {size} workers")
    return scaling


def scaling_status(scaling: Scaling | None) -> dict[str, Any]:
    """``status.autoscaling``: the last decision in words and its figures (null without autoscaling)."""
    if scaling is None:
        return {"autoscaling": None}
    decision, size = scaling.decision, scaling.autoscaler.replicas
    reason = decision.reason if decision is not None else f"starting: {size} workers"

    def rounded(name: str, digits: int) -> float | None:
        value = None if decision is None else getattr(decision, name)
        return None if value is None else round(float(value), digits)

    when = scaling.last_scale_time
    return {
        "autoscaling": {
            "reason": reason,
            "learnerStarvedRatio": rounded("starved_ratio", 2),
            "workersBlockedRatio": rounded("blocked_ratio", 2),
            "learnerRowsPerSecond": rounded("learner_rows_per_s", 0),
            "workerRowsPerSecond": rounded("worker_rows_per_s", 0),
            "lastScaleTime": None if when is None else datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastActiveReplicas": scaling.autoscaler.last_active or 0,
        }
    }

"""Disruptions: worker pods that went away for the cluster's reasons, not their own. Pure.

Kubernetes marks such a pod with the condition ``DisruptionTarget`` before it stops it.
Each is counted in ``status.disruptions`` under one of :data:`KINDS` (once per pod uid:
the condition's reason, or ``Deleted`` without one, ``Other`` for a reason newer than this
operator), replaced at once (no backoff) and never counted against
``restartPolicy.maxRestarts``. Which reason is which kind, and why:
docs/cluster-sharing-disruptions.md ("Disruption or failure"). A worker whose containers
failed (exit code != 0, OOMKilled) without such a condition is a failure, counted against
``maxRestarts`` with backoff, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rolloutfleet_operator.children.pods import PodView

KINDS = ("Evicted", "Preempted", "NodeTainted", "KubeletTerminated", "NodeGone", "Deleted", "Other")
_KIND_OF_REASON = {
    "EvictionByEvictionAPI": "Evicted",
    "PreemptionByScheduler": "Preempted",
    "DeletionByTaintManager": "NodeTainted",
    "TerminationByKubelet": "KubeletTerminated",
    "DeletionByPodGC": "NodeGone",
}
NODE_SILENT_S = 30.0
"""A pod still there this long after its grace period ended: its kubelet cannot confirm."""


def kind_of(pod: PodView) -> str:
    """The ``status.disruptions`` key of a pod that went away without our delete."""
    if not pod.disruption:
        return "Deleted"
    return _KIND_OF_REASON.get(pod.disruption, "Other")


def describe(pod: PodView) -> str:
    """One line for an Event and ``lastDisruption``: the kind, then Kubernetes' own words."""
    kind = kind_of(pod)
    if not pod.disruption:
        return f"{kind}: deleted without a DisruptionTarget condition (kubectl delete pod?)"
    detail = f"{pod.disruption}: {pod.disruption_message}" if pod.disruption_message else pod.disruption
    return f"{kind}: {detail}"


def counts_from_status(status: Mapping[str, Any] | None) -> dict[str, int]:
    """Every kind's count as persisted in ``status.disruptions`` (0 where absent or garbled)."""
    stored = (status or {}).get("disruptions") or {}
    counts = dict.fromkeys(KINDS, 0)
    for kind in KINDS:
        try:
            counts[kind] = max(0, int(stored.get(kind) or 0))
        except (TypeError, ValueError):
            continue  # hand-edited garbage: start that count again rather than wedge the job
    return counts


def needs_force_delete(pod: PodView, now: float, deletion_at: float | None) -> bool:
    """Whether a pod being deleted is stuck on a node that cannot confirm its end, so only
    a delete with grace 0 lets its name (and the worker's index) be used again.

    The taint manager deletes pods of a node that stopped reporting (``DeletionByTaintManager``,
    after ``nodeLossSeconds``), and the node lifecycle controller marked them not ready when
    the node went silent: that pod's kubelet is not there to finish the delete. Any pod still
    there :data:`NODE_SILENT_S` after its grace period ended is in the same state, whoever
    deleted it. A worker still running on a partitioned node does not collide with its
    replacement: each publisher has its own random producer id (see the docs)."""
    if not pod.deleting:
        return False
    if pod.disruption == "DeletionByTaintManager" and not pod.ready:
        return True
    return deletion_at is not None and now - deletion_at >= NODE_SILENT_S

"""Kueue admission of a RolloutJob (an external framework of Kueue). Pure.

A job labelled ``kueue.x-k8s.io/queue-name`` is admitted through a Workload the operator
keeps (one pod set ``workers``: the worker pod's scheduling fields, count = replicas).
Its name hashes what Kueue admits (pod set, queue, priority class): a change (``kubectl
scale``, new requests, another queue) makes a new Workload that queues again, as Kueue
wants (pod sets are immutable while quota is reserved); the old one goes once no pod is
left. No pod exists without an Admitted Workload that is not Evicted: the gate is the
Workload's status, which only Kueue writes admissions into. On eviction the operator
deletes the pods (not failures) and then hands the quota back as Kueue's jobframework
does (admission cleared, QuotaReserved False/Pending, Requeued); Kueue requeues it. The
PodsReady condition follows the workers' readiness (for Kueue's waitForPodsReady).

**Elastic jobs** (annotation ``kueue.x-k8s.io/elastic-job: "true"``, Kueue's own opt-in;
Kueue's ``ElasticJobsViaWorkloadSlices`` gate on) change size without stopping: the Workload's
name hashes the pod set without its count, so a new size is no new admission. A scale-down
lowers the admitted Workload's count in place (the quota goes back at once); a scale-up is
a new slice annotated ``kueue.x-k8s.io/workload-slice-replacement-for`` the admitted one,
which Kueue admits for the difference and then finishes the old slice (KEP-77). Until it
is admitted the workers the old slice admitted keep running: :mod:`.slices`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ELASTIC_ANNOTATION = "kueue.x-k8s.io/elastic-job"
REPLACEMENT_FOR = "kueue.x-k8s.io/workload-slice-replacement-for"
SHAPE_LABEL = "rolloutfleet.io/workload-shape"
SLICE_REPLACED = "WorkloadSliceReplaced"  # the Finished reason of a slice its replacement took over
"""On an elastic job's Workloads: the hash of what Kueue admits but the count. Slices of
one shape are one admission that changes size; another shape queues again."""
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
WORKLOADS = (GROUP, VERSION, "workloads")
POD_SET = "workers"
# Evictions after which Kueue's own job controllers set Requeued True (jobframework).
_REQUEUED_REASONS = ("Preempted", "NodeFailures")
# Pod spec fields Kueue reads to admit and place a pod set (flavors, quota, priority).
_SCHEDULING_FIELDS = ("nodeSelector", "tolerations", "affinity", "priorityClassName", "overhead", "runtimeClassName")


def queue_name(labels: Mapping[str, str]) -> str | None:
    return labels.get(QUEUE_LABEL) or None


def is_elastic(annotations: Mapping[str, str]) -> bool:
    """Whether the job asked to change size inside its admission (Kueue's annotation)."""
    return annotations.get(ELASTIC_ANNOTATION) == "true"


def pod_set_template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What Kueue needs of a worker pod: its containers' requests/limits (GPUs included)
    and where it may run; env, probes and the like do not change admission."""
    spec = pod["spec"]
    containers = [
        {"name": c["name"], "resources": c.get("resources", {})} for c in spec.get("containers", [])
    ]  # fmt: skip
    kept = {k: spec[k] for k in _SCHEDULING_FIELDS if k in spec}
    return {"spec": {"restartPolicy": spec.get("restartPolicy", "Never"), "containers": containers, **kept}}


def build_workload(
    job_name: str,
    namespace: str,
    uid: str,
    labels: Mapping[str, str],
    replicas: int,
    pod: Mapping[str, Any],
    priority: int | None,
    owner: Mapping[str, Any],
    job_label: str,
    elastic: bool = False,
) -> dict[str, Any]:
    """The Workload for the job as it is now (``pod``: a worker pod as built for it).
    ``elastic``: named by its shape (the count left out of the hash), and labelled with it;
    :func:`.slices.decide_elastic` gives it its slice number."""
    priority_class = labels.get(PRIORITY_LABEL) or None
    spec: dict[str, Any] = {
        "queueName": labels[QUEUE_LABEL],
        "podSets": [{"name": POD_SET, "count": replicas, "template": pod_set_template(pod)}],
    }
    if priority_class is not None:
        spec["priorityClassRef"] = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": priority_class}
        spec["priority"] = priority if priority is not None else 0
    hashed = _without_count(spec) if elastic else spec
    digest = hashlib.sha256(json.dumps([uid, hashed], sort_keys=True).encode()).hexdigest()[:10]
    metadata: dict[str, Any] = {
        "name": f"rolloutjob-{job_name[:40].rstrip('-.')}-{digest}",
        "namespace": namespace,
        "labels": {job_label: job_name},
        "ownerReferences": [dict(owner)],
    }
    if elastic:
        metadata["labels"][SHAPE_LABEL] = digest
        metadata["annotations"] = {ELASTIC_ANNOTATION: "true"}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload", "metadata": metadata, "spec": spec}


def _without_count(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {**spec, "podSets": [{k: v for k, v in ps.items() if k != "count"} for ps in spec["podSets"]]}


def pod_count(workload: Mapping[str, Any]) -> int:
    """The workers the Workload asks for (its one pod set's count)."""
    return int(workload["spec"]["podSets"][0].get("count", 1))


def admitted_pods(workload: Mapping[str, Any]) -> int:
    """The workers an admitted Workload allows: what Kueue assigned (fewer than asked when it
    admitted part of a pod set with ``minCount``), and no more than it asks for now."""
    admission = (workload.get("status") or {}).get("admission") or {}
    for assignment in admission.get("podSetAssignments") or []:
        if assignment.get("name") == POD_SET and assignment.get("count") is not None:
            return min(int(assignment["count"]), pod_count(workload))
    return pod_count(workload)


def with_count(workload: Mapping[str, Any], count: int) -> dict[str, Any]:
    """A merge patch setting the Workload's worker count, refused if it changed meanwhile
    (a merge patch replaces the pod set list whole: the rest is sent as it was)."""
    pod_sets = [dict(ps) for ps in workload["spec"]["podSets"]]
    pod_sets[0]["count"] = count
    if "minCount" in pod_sets[0]:
        pod_sets[0]["minCount"] = min(int(pod_sets[0]["minCount"]), count)
    return {"metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]}, "spec": {"podSets": pod_sets}}


def _condition(workload: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def _true(workload: Mapping[str, Any], type_: str) -> bool:
    found = _condition(workload, type_)
    return found is not None and found.get("status") == "True"


def is_admitted(workload: Mapping[str, Any]) -> bool:
    """Admitted and not being evicted: the only state in which workers may run."""
    return _true(workload, "Admitted") and not _true(workload, "Evicted")


def holds_quota(workload: Mapping[str, Any]) -> bool:
    return _true(workload, "QuotaReserved") or bool((workload.get("status") or {}).get("admission"))


def is_finished(workload: Mapping[str, Any]) -> bool:
    """Finished: for a slice, replaced by the next one (reason WorkloadSliceReplaced)."""
    return _true(workload, "Finished")


@dataclass(frozen=True)
class Waiting:
    """Why a Kueue-managed job has no workers now (the job's status says it)."""

    reason: str
    message: str


def waiting_for(workload: Mapping[str, Any]) -> Waiting:
    """Kueue's own words for a Workload that is not (or no longer) admitted."""
    name = workload["metadata"]["name"]
    evicted = _condition(workload, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return Waiting(
            f"Evicted{evicted.get('reason', '')}", f"Kueue evicted workload {name}: {evicted.get('message', '')}"
        )
    for type_ in ("QuotaReserved", "Admitted"):
        found = _condition(workload, type_)
        if found is not None and found.get("status") == "False" and found.get("message"):
            return Waiting(str(found.get("reason") or "Pending"), f"workload {name}: {found['message']}")
    if holds_quota(workload):
        return Waiting("QuotaReserved", f"workload {name}: quota reserved, waiting for admission checks")
    return Waiting("Pending", f"workload {name} is waiting for Kueue to consider it")


def flavor_placement(workload: Mapping[str, Any], flavors: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """nodeSelector and tolerations of the flavors admitted for the worker pod set, as
    Kueue's jobframework applies them (RunWithPodSetsInfo). ``flavors``: name -> the
    ResourceFlavor object. Raises KeyError naming a flavor that is not there."""
    admission = (workload.get("status") or {}).get("admission") or {}
    names: list[str] = []
    for assignment in admission.get("podSetAssignments") or []:
        if assignment.get("name") == POD_SET:
            names = sorted(set((assignment.get("flavors") or {}).values()))
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    for name in names:
        spec = flavors[name].get("spec") or {}
        node_selector.update(spec.get("nodeLabels") or {})
        tolerations += [dict(t) for t in spec.get("tolerations") or [] if dict(t) not in tolerations]
    return {"nodeSelector": node_selector, "tolerations": tolerations}


def admitted_flavors(workload: Mapping[str, Any]) -> list[str]:
    admission = (workload.get("status") or {}).get("admission") or {}
    return sorted({f for a in admission.get("podSetAssignments") or [] for f in (a.get("flavors") or {}).values()})


def place(pod: dict[str, Any], placement: Mapping[str, Any]) -> dict[str, Any]:
    """``pod`` with the admitted flavors' node labels and tolerations added to its own."""
    spec = pod["spec"]
    if placement.get("nodeSelector"):
        spec["nodeSelector"] = {**spec.get("nodeSelector", {}), **placement["nodeSelector"]}
    extra = [t for t in placement.get("tolerations", []) if t not in spec.get("tolerations", [])]
    if extra:
        spec["tolerations"] = [*spec.get("tolerations", []), *extra]
    return pod


def requeue_status(workload: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The status patch that hands an evicted Workload's quota back once its pods are
    gone, as Kueue's jobframework does for its own jobs: admission cleared, QuotaReserved
    False (Pending), Admitted False (NoReservation), Requeued (True after a preemption)."""
    evicted = _condition(workload, "Evicted") or {}
    reason, message = str(evicted.get("reason") or "Evicted"), str(evicted.get("message") or "evicted")
    wanted = {
        "QuotaReserved": ("False", "Pending", message),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
        "Requeued": ("True" if reason in _REQUEUED_REASONS else "False", reason, message),
    }
    if _condition(workload, "PodsReady") is not None:
        wanted["PodsReady"] = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    return _with_conditions(workload, wanted, now, {"admission": None})


def pods_ready_status(workload: Mapping[str, Any], all_ready: bool, now: float) -> dict[str, Any] | None:
    """The status patch that keeps an admitted Workload's PodsReady condition true to the
    workers (what Kueue's waitForPodsReady acts on), as jobframework words it; None when
    it already says so."""
    old = _condition(workload, "PodsReady")
    if all_ready:
        recovering = old is not None and old.get("reason") in ("WaitForRecovery", "Recovered")
        wanted = (
            "True",
            "Recovered" if recovering else "Started",
            "All pods reached readiness and the workload is running",
        )
    elif old is not None and (old.get("status") == "True" or old.get("reason") == "WaitForRecovery"):
        wanted = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    else:
        wanted = ("False", "WaitForStart", "Not all pods are ready or succeeded")
    if old is not None and (old.get("status"), old.get("reason")) == wanted[:2]:
        return None
    return _with_conditions(workload, {"PodsReady": wanted}, now, {})


def _with_conditions(
    workload: Mapping[str, Any], wanted: Mapping[str, tuple[str, str, str]], now: float, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """A merge patch of the Workload's status setting ``wanted`` (type -> status, reason,
    message), the other conditions kept; refused if the Workload changed meanwhile."""
    generation = int(workload["metadata"].get("generation") or 1)
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        dict(c) for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") not in wanted
    ]
    for type_, (status, why, text) in wanted.items():
        old = _condition(workload, type_)
        moved = old is None or old.get("status") != status
        conditions.append({
            "type": type_, "status": status, "reason": why, "message": text[:32768],
            "observedGeneration": generation,
            "lastTransitionTime": stamp if moved or old is None else old.get("lastTransitionTime", stamp),
        })  # fmt: skip
    return {"metadata": {"resourceVersion": workload["metadata"]["resourceVersion"]},
            "status": {**extra, "conditions": conditions}}  # fmt: skip


@dataclass
class Decision:
    """What to do about a Kueue-managed job's Workloads in this round."""

    create: dict[str, Any] | None = None  # the wanted Workload, absent from the cluster
    delete: list[str] = field(default_factory=list)  # stale Workloads (names)
    requeue: list[dict[str, Any]] = field(default_factory=list)  # evicted ones to hand back
    admitted: dict[str, Any] | None = None  # the wanted Workload, when workers may run
    waiting: Waiting | None = None
    resize: tuple[dict[str, Any], int] | None = None  # elastic: (a Workload, its new count)
    admitted_count: int | None = None  # elastic: the workers the admitted slice allows
    scale_up: Waiting | None = None  # elastic: why the workers past admitted_count wait
    evicted: tuple[str, str] | None = None  # (which eviction, its status.disruptions kind): see eviction()


def eviction(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """An evicted Workload's eviction, once per eviction: ``(name@time, kind)``, the kind a
    ``status.disruptions`` key (``Preempted`` for Kueue's preemptions, else ``Evicted``)."""
    evicted = _condition(workload, "Evicted")
    if evicted is None or evicted.get("status") != "True":
        return None
    kind = "Preempted" if evicted.get("reason") == "Preempted" else "Evicted"
    return f"{workload['metadata']['name']}@{evicted.get('lastTransitionTime', '')}", kind


def decide(wanted: dict[str, Any], existing: Iterable[Mapping[str, Any]], pods_left: bool) -> Decision:
    """``existing``: the job's Workloads as the watch sees them; ``pods_left``: whether any
    pod of the job is still there (not yet gone after a delete)."""
    name = wanted["metadata"]["name"]
    found = {w["metadata"]["name"]: w for w in existing}
    current = found.pop(name, None)
    decision = Decision()
    if current is None:
        decision.create = wanted
        decision.waiting = Waiting("Pending", f"creating workload {name} in LocalQueue {wanted['spec']['queueName']}")
    elif is_admitted(current):
        decision.admitted = dict(current)
    else:
        decision.waiting = waiting_for(current)
    for other in found.values():
        if (decision.admitted is not None or not pods_left) and other["metadata"].get("deletionTimestamp") is None:
            decision.delete.append(other["metadata"]["name"])
    if current is not None and _true(current, "Evicted") and holds_quota(current) and not pods_left:
        decision.requeue.append(dict(current))
    decision.evicted = eviction(current) if current is not None else None
    return decision

"""Kueue's gate for one reconcile of a RolloutJob: the Workload calls, and what they mean
for the job's pods (decisions are :mod:`.kueue`'s). Thin, like :mod:`.api_calls`.

Kueue not installed (no Workload API) but the queue label set: the job waits with reason
``KueueNotInstalled`` and no pods. Kueue down: its webhook refuses the Workload, or no one
admits it; either way no pod starts, since only an Admitted Workload lets pods exist.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import JOB_LABEL, PodView, owner_reference
from rolloutfleet_operator.kueue import admission as kueue
from rolloutfleet_operator.kueue import slices
from rolloutfleet_operator.loop.api_calls import Api, post_event, refusal_reason

log = logging.getLogger(__name__)
_GROUP, _VERSION, _WORKLOADS = kueue.WORKLOADS
EXISTS = kueue.Waiting("Exists", "the workload was there already (created in an earlier round)")
"""What :func:`_create` says of a Workload another round made (no event, no wait)."""
NOT_INSTALLED = kueue.Waiting(
    "KueueNotInstalled",
    f"the job is labelled {kueue.QUEUE_LABEL} but this cluster does not serve Kueue's "
    f"{kueue.GROUP}/{kueue.VERSION} Workloads: install Kueue with the external framework "
    "RolloutJob.v1alpha1.rolloutfleet.io, or remove the label",
)


@dataclass
class Gate:
    """What Kueue allows this round: pods or not, and where they go."""

    allowed: bool = True
    waiting: kueue.Waiting | None = None  # why there are no workers (status phase Queued)
    placement: dict[str, Any] = field(default_factory=dict)  # the admitted flavors' nodeSelector/tolerations
    admitted: int | None = None  # an elastic job: the workers Kueue admits now (None: all it wants)
    scale_up: kueue.Waiting | None = None  # an elastic job: why the workers past ``admitted`` wait
    workload: str | None = None  # the admitted (else the waiting) Workload's name
    evicted: tuple[str, str] | None = None  # Kueue's eviction of the job, if any: (which, disruption kind)

    def new_eviction(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        """The eviction to count in ``status.disruptions``: one not counted yet (the status
        names the last one counted in ``kueueEviction``)."""
        if self.evicted is None or (status or {}).get("kueueEviction") == self.evicted[0]:
            return None
        return self.evicted

    def place(self, pod: dict[str, Any]) -> dict[str, Any]:
        return kueue.place(pod, self.placement) if self.placement else pod

    def within(self, job: RolloutJob) -> RolloutJob:
        """``job`` as Kueue lets it run: suspended without an admission, and no more
        workers than an elastic job's admitted slice allows."""
        if not self.allowed:
            return job.model_copy(update={"spec": job.spec.model_copy(update={"suspend": True})})
        if self.admitted is not None and self.admitted < job.spec.replicas:
            return job.model_copy(update={"spec": job.spec.model_copy(update={"replicas": self.admitted})})
        return job

    def scale_up_words(self, job: RolloutJob) -> tuple[str, str] | None:
        """(reason, message) for the workers an elastic job wants past its admission."""
        if not self.allowed or self.admitted is None or self.admitted >= job.spec.replicas:
            return None
        why = self.scale_up or kueue.Waiting("Pending", "waiting for Kueue")
        more = job.spec.replicas - self.admitted
        return "ScaleUpQueued", f"{more} more worker(s) wait for Kueue ({why.reason}): {why.message}"

    def status(self, job: RolloutJob) -> dict[str, Any]:
        """``status.kueue`` of an elastic job: its admitted Workload, how many workers Kueue
        admits and which wait, and why; empty for other jobs."""
        if self.admitted is None:
            return {"kueue": None}  # null, not absent: a merge patch removes an old one
        wanted = 0 if job.spec.suspend else job.spec.replicas
        admitted = min(self.admitted, wanted) if self.allowed else 0
        why = self.scale_up if self.allowed else self.waiting
        return {
            "kueue": {
                "workload": self.workload,
                "admittedReplicas": admitted,
                "queuedWorkers": list(range(admitted, wanted)),
                "reason": why.reason if why is not None and admitted < wanted else None,
                "message": why.message if why is not None and admitted < wanted else None,
            }
        }


async def kueue_gate(
    api: Api,
    body: Mapping[str, Any],
    job: RolloutJob,
    pods: Collection[PodView],
    workloads: Iterable[Mapping[str, Any]],
    build_pod: Callable[[], dict[str, Any]],
) -> Gate:
    """Keep the job's Workload and say whether its workers may run. ``build_pod``: a worker
    pod as the reconcile would create it (its requests are what Kueue admits)."""
    labels = body["metadata"].get("labels") or {}
    existing = list(workloads)
    if kueue.queue_name(labels) is None:
        if existing:  # the label was removed: the job no longer waits for Kueue
            await asyncio.gather(*(_delete(api, job.namespace, w["metadata"]["name"]) for w in existing))
        return Gate()
    pods_left = any(not p.terminated for p in pods)  # a kept failed pod holds nothing
    if job.spec.suspend:  # quota goes back once the pods are gone; resuming queues again
        if not pods_left:
            await asyncio.gather(*(_delete(api, job.namespace, w["metadata"]["name"]) for w in existing))
        return Gate(allowed=False)
    priority, problem = await _priority(api, labels.get(kueue.PRIORITY_LABEL))
    if problem is not None:
        return Gate(allowed=False, waiting=problem)
    owner = owner_reference(job, str(body["metadata"]["uid"]))
    elastic = kueue.is_elastic(body["metadata"].get("annotations") or {})
    wanted = kueue.build_workload(
        job.name, job.namespace, str(body["metadata"]["uid"]), labels, job.spec.replicas, build_pod(), priority,
        owner, JOB_LABEL, elastic=elastic,
    )  # fmt: skip
    if elastic:
        decision = slices.decide_elastic(wanted, existing, pods_left, time.time())
    else:
        decision = kueue.decide(wanted, existing, pods_left)
    await asyncio.gather(*(_delete(api, job.namespace, name) for name in decision.delete))
    refused = await _resize(api, decision.resize) if decision.resize is not None else None
    for evicted in decision.requeue:
        await _patch_status(api, job.namespace, evicted["metadata"]["name"], kueue.requeue_status(evicted, time.time()))
    scale_up = refused or decision.scale_up
    if decision.create is not None:
        created = await _create(api, decision.create)
        name = decision.create["metadata"]["name"]
        if created is None:
            what = (
                "to grow the fleet" if decision.admitted is not None else f"in LocalQueue {wanted['spec']['queueName']}"
            )
            post_event(body["metadata"], "Normal", "WorkloadCreated", f"created Kueue workload {name} {what}")
        elif created is not EXISTS and decision.admitted is None:
            return Gate(allowed=False, waiting=created)
        elif created is not EXISTS:
            scale_up = created  # the admitted workers go on; the scale-up says why it waits
    if decision.admitted is None:
        return Gate(allowed=False, waiting=decision.waiting, admitted=decision.admitted_count, evicted=decision.evicted)
    admitted = decision.admitted_count
    wanted_now = job.spec.replicas if admitted is None else admitted
    gate = Gate(admitted=admitted, scale_up=scale_up, workload=decision.admitted["metadata"]["name"])
    live = [p for p in pods if not p.deleting and not p.terminated]
    ready = sum(1 for p in live if p.ready) >= wanted_now
    ready_patch = kueue.pods_ready_status(decision.admitted, ready, time.time())
    if ready_patch is not None and not kueue.is_finished(decision.admitted):
        await _patch_status(api, job.namespace, decision.admitted["metadata"]["name"], ready_patch)
    if len(live) >= wanted_now:
        return gate  # nothing to create: no need to read the flavors
    names = kueue.admitted_flavors(decision.admitted)
    flavors = await _read_flavors(api, names)
    try:
        gate.placement = kueue.flavor_placement(decision.admitted, flavors)
    except KeyError as missing:
        return Gate(allowed=False, waiting=kueue.Waiting("FlavorNotFound", f"ResourceFlavor {missing} not found"))
    return gate


async def _resize(api: Api, resize: tuple[dict[str, Any], int]) -> kueue.Waiting | None:
    """Set a Workload's worker count (an elastic job's scale-down, or a waiting slice
    following the wanted count); None when done or when it changed meanwhile (the next
    round sees it), else why Kueue refused (its feature gate off: pod sets immutable)."""
    workload, count = resize
    name, namespace = workload["metadata"]["name"], workload["metadata"]["namespace"]
    async with api.slots:
        try:
            await asyncio.to_thread(
                api.custom.patch_namespaced_custom_object, _GROUP, _VERSION, namespace, _WORKLOADS, name,
                kueue.with_count(workload, count),
            )  # fmt: skip
        except ApiException as error:
            if error.status in (404, 409):
                return None
            if error.status not in (400, 403, 422):
                raise
            message = (
                f"Kueue refused to set workload {name}'s count from {kueue.pod_count(workload)} to {count} "
                f"({refusal_reason(error)}); an elastic job needs Kueue's ElasticJobsViaWorkloadSlices feature gate"
            )
            return kueue.Waiting("WorkloadResizeRefused", message)
    log.info("workload %s/%s: count %d -> %d", namespace, name, kueue.pod_count(workload), count)
    return None


async def _priority(api: Api, name: str | None) -> tuple[int | None, kueue.Waiting | None]:
    """The value of WorkloadPriorityClass ``name`` (Kueue's priority for the Workload)."""
    if not name:
        return None, None
    async with api.slots:
        try:
            found: Any = await asyncio.to_thread(
                api.custom.get_cluster_custom_object, _GROUP, _VERSION, "workloadpriorityclasses", name
            )
        except ApiException as error:
            if _not_served(error):
                return None, NOT_INSTALLED
            if error.status == 404:
                message = f"WorkloadPriorityClass {name} (label {kueue.PRIORITY_LABEL}) not found"
                return None, kueue.Waiting("PriorityClassNotFound", message)
            raise
    return int(found.get("value") or 0), None


async def _create(api: Api, workload: dict[str, Any]) -> kueue.Waiting | None:
    """None once this call made the Workload, :data:`EXISTS` when it was there already;
    else why it cannot be created (status words)."""
    namespace = workload["metadata"]["namespace"]
    async with api.slots:
        try:
            await asyncio.to_thread(
                api.custom.create_namespaced_custom_object, _GROUP, _VERSION, namespace, _WORKLOADS, workload
            )
        except ApiException as error:
            if error.status == 409:
                return EXISTS
            if error.status == 404:  # the namespace exists (the job is in it): the resource does not
                return NOT_INSTALLED
            reason = refusal_reason(error)
            # Kueue's webhook down or refusing: the job waits, and says why.
            return kueue.Waiting(
                "WorkloadRefused", f"the API server refused workload {workload['metadata']['name']}: {reason}"
            )
    return None


async def _delete(api: Api, namespace: str, name: str) -> None:
    async with api.slots:
        try:
            await asyncio.to_thread(
                api.custom.delete_namespaced_custom_object, _GROUP, _VERSION, namespace, _WORKLOADS, name
            )
        except ApiException as error:
            if error.status != 404:
                raise
    log.info("deleted workload %s/%s", namespace, name)


async def _patch_status(api: Api, namespace: str, name: str, patch: dict[str, Any]) -> None:
    async with api.slots:
        try:
            await asyncio.to_thread(
                api.custom.patch_namespaced_custom_object_status, _GROUP, _VERSION, namespace, _WORKLOADS, name, patch
            )
        except ApiException as error:
            if error.status not in (404, 409):  # gone, or changed meanwhile: the next round sees it
                raise
    log.info("patched the status of workload %s/%s: %s", namespace, name, sorted(patch["status"]))


async def _read_flavors(api: Api, names: Iterable[str]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for name in names:
        async with api.slots:
            try:
                flavor: Any = await asyncio.to_thread(
                    api.custom.get_cluster_custom_object, _GROUP, _VERSION, "resourceflavors", name
                )
                found[name] = flavor
            except ApiException as error:
                if error.status != 404:
                    raise
    return found


def _not_served(error: ApiException) -> bool:
    """A 404 for a resource the server does not serve ("404 page not found"), as opposed
    to one for a missing object (a Status body naming it)."""
    if error.status != 404:
        return False
    try:
        return json.loads(error.body or "").get("kind") != "Status"
    except (ValueError, AttributeError):
        return True

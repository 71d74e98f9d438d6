"""One reconcile of one RolloutJob: observe, plan, write the status, delete, create.

State-based: every round starts from the job and its pods as the kopf indexes hold them
(:mod:`.observe` corrects them by what this process did since), decides with the pure
:func:`.plan.plan` and :func:`.status.build_status`, and carries the decision out with
the calls of :mod:`.api_calls`. It persists restart and disruption records in the status
*before* it deletes a pod, and creates pods under deterministic names, so an operator
killed at any point and started again neither double-counts nor duplicates a pod. It
keeps the job's PodDisruptionBudget as the spec says (no call while the index agrees), and
an external env's Service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.transport.redis.clients import worker_connections
from rolloutfleet_operator import metrics
from rolloutfleet_operator.children.disruptions import counts_from_status
from rolloutfleet_operator.children.evaluators import (
    build_evaluator_pod,
    evaluation_status,
    evaluator_hash,
    plan_evaluators,
)
from rolloutfleet_operator.children.images import worker_image
from rolloutfleet_operator.children.keep import keep_ca_secret, keep_network_policy, keep_pdb, keep_service
from rolloutfleet_operator.children.pods import (
    PodView,
    build_pod,
    template_hash,
)
from rolloutfleet_operator.kueue.api import Gate, kueue_gate
from rolloutfleet_operator.loop.api_calls import (
    create_pod,
    delete_pod,
    patch_status,
    post_event,
)
from rolloutfleet_operator.loop.observe import observe
from rolloutfleet_operator.loop.plan import Event, Plan, creation_batches, plan, records_from_status
from rolloutfleet_operator.loop.runtime import JobRuntime, Key, Runtime
from rolloutfleet_operator.loop.status import (
    build_status,
    invalid_spec_status,
    league_status,
    redis_conditions,
    status_changed,
)
from rolloutfleet_operator.redis.defaults import defaults_status, job_of
from rolloutfleet_operator.redis.users import Isolation, isolation_condition, keep_users
from rolloutfleet_operator.scaling.autoscale_tick import announce
from rolloutfleet_operator.scaling.custom_metrics import custom_metrics_status
from rolloutfleet_operator.scaling.scale import Scaling, scaling_status, sync_scaling

# The kopf indexes, as handlers.job_index, handlers.pod_index and handlers.pdb_index fill them.
JobIndex = Mapping[Key, Collection[dict[str, Any]]]
PodIndex = Mapping[Key, Collection[PodView]]
WorkloadIndex = Mapping[Key, Collection[dict[str, Any]]]  # handlers.workload_index: Kueue Workloads by job
PdbIndex = Mapping[Key, Collection[dict[str, Any]]]


async def reconcile(
    key: Key,
    runtime: Runtime,
    job_index: JobIndex,
    pod_index: PodIndex,
    workload_index: WorkloadIndex | None = None,
    pdb_index: PdbIndex | None = None,
) -> float | None:
    """Seconds until a restart of this job falls due (None: none pending)."""
    started, now = time.perf_counter(), time.time()
    if (found := await _usable_job(runtime, key, job_index, now)) is None:
        return None
    body, job = found
    state, (namespace, name), config = runtime.job(key), key, runtime.config
    current_hash = template_hash(job, config)
    uid = str(body["metadata"]["uid"])
    own_status = state.written if state.written is not None and state.written_for == uid else body["status"]
    clock = time.monotonic()
    job, scaling = _autoscaled(job, state, body, key, own_status, clock)
    views = list(pod_index.get(key, []))
    evaluators = [view for view in views if view.role == "evaluator"]  # spec.evaluation's, planned apart
    watched = runtime.pod_versions.get(namespace)  # how far the pod watch got: what it must have shown
    observation = observe(state.memory, [view for view in views if view.role == "worker"], clock, watched)
    # Kueue (a queue-name label): no pods without an admitted Workload; deleting them then is no failure.
    gate = await kueue_gate(runtime.api, body, job, observation.pods, (workload_index or {}).get(key, []),
                            lambda: build_pod(job, uid, 0, config, current_hash))  # fmt: skip
    the_plan = plan(
        gate.within(job),
        observation.pods,
        records_from_status(own_status),
        now,
        current_hash,
        max_unavailable=config.max_unavailable,
        vanished=observation.vanished,
        disruptions=_with_eviction(counted := counts_from_status(own_status), evicted := gate.new_eviction(own_status)),
    )
    state.memory = observation.memory
    to_create = observation.creatable(the_plan.create)
    isolation = await keep_users(runtime, state, body, job, uid, observation.pods)  # before any pod reads them

    # Records first: a failure is persisted before its pod is deleted.
    queued = (gate.waiting.reason, gate.waiting.message) if gate.waiting else None
    status = build_status(
        name, job.spec.suspend, the_plan, observation.pods, int(body["metadata"]["generation"]), now, own_status,
        state.beats, namespace, queued, image=worker_image(job, config), scale_up=gate.scale_up_words(job),
    ) | scaling_status(scaling) | gate.status(job)  # fmt: skip
    _add_status_parts(status, body, job, state, the_plan, evaluators, isolation, own_status, now)
    status["kueueEviction"] = (own_status or {}).get("kueueEviction")  # the last counted, carried on
    if evicted is not None:  # counted once: the status names it
        status["kueueEviction"] = evicted[0]
        post_event(body["metadata"], "Normal", "EvictedByKueue", f"{evicted[1]}: {queued[1] if queued else evicted[0]}")
    if (filled := defaults_status(body["spec"], job, config)) is not None:
        status["redisDefaults"] = filled  # what the operator filled in: the URL, the CA's copy
    await _write_status(runtime, key, body, status)
    state.written, state.written_for = status, uid
    _count_and_tell(key, body, job, status, the_plan, counted)
    await _delete_pods(runtime, state, body, namespace, the_plan.delete, observation.pods)
    await keep_network_policy(runtime, state, body, job, uid, clock)  # before the pods it restricts
    await keep_ca_secret(runtime, state, body, job, uid, clock)  # before the pods that mount it
    await _create_pods(runtime, state, body, job, uid, current_hash, to_create, gate)
    await _keep_evaluators(runtime, body, job, uid, evaluators, gate.allowed and not job.spec.suspend, now)
    await keep_pdb(runtime, state, body, job, uid, list((pdb_index or {}).get(key, [])), clock)
    await keep_service(runtime, state, body, job, uid, clock)
    metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    return the_plan.requeue_after


def _with_eviction(counted: dict[str, int], evicted: tuple[str, str] | None) -> dict[str, int]:
    """The disruption counts with Kueue's eviction of the job (its preemption, ...) added."""
    if evicted is None:
        return counted
    return {**counted, evicted[1]: counted.get(evicted[1], 0) + 1}


async def _usable_job(
    runtime: Runtime, key: Key, job_index: JobIndex, now: float
) -> tuple[dict[str, Any], RolloutJob] | None:
    """The job's body and its spec; None when the job is gone or being deleted (its metrics are
    forgotten), or when its spec cannot be used (reported in its status and an event)."""
    bodies = list(job_index.get(key, []))
    if not bodies or bodies[0]["metadata"].get("deletionTimestamp"):
        metrics.forget_job(*key)
        return None
    body = bodies[0]
    state = runtime.job(key)
    try:
        job = job_of(key, body["spec"], runtime.config)
    except SpecError as error:
        await _report_invalid_spec(runtime, state, key, body, f"spec cannot be used: {error}", now)
        return None
    state.reported_invalid = ""
    return body, job


def _autoscaled(
    job: RolloutJob, state: JobRuntime, body: dict[str, Any], key: Key, own_status: Any, clock: float
) -> tuple[RolloutJob, Scaling | None]:
    """spec.autoscaling: the job with the autoscaler's size (.autoscale_tick decides it on the
    timer) for spec.replicas, and the scaling state (None without autoscaling)."""
    scaling = state.scaling = sync_scaling(state.scaling, job, own_status, clock)
    if scaling is None:
        return job, None
    announce(body, key, scaling)  # a kubectl scale seen here first
    return job.model_copy(
        update={"spec": job.spec.model_copy(update={"replicas": scaling.autoscaler.replicas})}
    ), scaling


def _add_status_parts(
    status: dict[str, Any],
    body: dict[str, Any],
    job: RolloutJob,
    state: JobRuntime,
    the_plan: Plan,
    evaluators: list[PodView],
    isolation: Isolation,
    own_status: dict[str, Any] | None,
    now: float,
) -> None:
    """What the other concerns add to the workers' status: spec.evaluation's pods and numbers,
    the callbacks' per-episode metrics, the RedisIsolated condition, and the operator's look at
    the job's Redis (a Warning Event for each condition that turns False, once per message)."""
    status |= evaluation_status(job, evaluators, state.evaluation, now)
    status |= league_status(job.spec.league, state.league)
    status |= custom_metrics_status(state.beats, the_plan.desired)
    generation = int(body["metadata"]["generation"])
    old_conditions = (own_status or {}).get("conditions") or []
    status["conditions"] = [*status["conditions"], isolation_condition(isolation, generation, now, old_conditions)]
    looked, limit = state.clients
    found = redis_conditions(looked > float("-inf"), state.redis_error, limit, worker_connections(job),
                             the_plan.desired, status["replicas"], generation, now, old_conditions)  # fmt: skip
    for warning in found:
        status["conditions"].append(warning)
        said = state.reported_conditions.get(warning["type"], "")
        if warning["status"] == "False" and said != warning["message"]:
            post_event(body["metadata"], "Warning", warning["reason"], warning["message"])
        state.reported_conditions[warning["type"]] = warning["message"] if warning["status"] == "False" else ""


def _count_and_tell(
    key: Key, body: dict[str, Any], job: RolloutJob, status: dict[str, Any], the_plan: Plan, counted: dict[str, int]
) -> None:
    """After the status is written: the restart-budget series, the plan's Events, and the
    disruptions counted since the last round."""
    metrics.record_budget(*key, int(status.get("restarts") or 0), job.spec.restart_policy.max_restarts)
    _post_plan_events(body, the_plan.events)
    for kind, count in the_plan.disruptions.items():
        if count > counted.get(kind, 0):
            metrics.WORKER_DISRUPTIONS.labels(kind=kind).inc(count - counted.get(kind, 0))


async def _report_invalid_spec(
    runtime: Runtime, state: JobRuntime, key: Key, body: dict[str, Any], message: str, now: float
) -> None:
    generation = int(body["metadata"]["generation"])
    await _write_status(runtime, key, body, invalid_spec_status(key[1], message, generation, now, body["status"]))
    if state.reported_invalid != message:
        state.reported_invalid = message
        post_event(body["metadata"], "Warning", "InvalidSpec", message)


async def _write_status(runtime: Runtime, key: Key, body: dict[str, Any], status: dict[str, Any]) -> None:
    """Patch the job's status where ``status`` differs from what the index holds."""
    if not status_changed(body["status"], status):
        return
    await patch_status(runtime.api, key[0], key[1], status)
    # The index entry is ours to update: it stays the newest we know until the watch
    # brings the patched version.
    body["status"] = {**body["status"], **status}


def _post_plan_events(body: dict[str, Any], events: Iterable[Event]) -> None:
    for event in events:
        post_event(body["metadata"], event.type, event.reason, event.message)
        if event.reason in ("WorkerFailed", "RestartBudgetExhausted"):
            meta = body["metadata"]
            metrics.WORKER_FAILURES.labels(namespace=meta.get("namespace", ""), job_name=meta["name"]).inc()


async def _delete_pods(
    runtime: Runtime,
    state: JobRuntime,
    body: dict[str, Any],
    namespace: str,
    deletes: list[tuple[str, str]],
    pods: Iterable[PodView],
) -> None:
    if not deletes:
        return  # the common round: no index of all pods to build
    by_name = {p.name: p for p in pods}
    calls = []
    for pod_name, why in deletes:
        pod = by_name.get(pod_name)
        if pod is not None:
            state.memory.note_deleted(pod.uid)
        # A terminated pod has nothing left to stop: no grace period to wait out. A pod
        # deleted already is deleted again only on a node that cannot confirm: grace 0.
        grace = 0 if pod is not None and (pod.terminated or pod.deleting) else runtime.config.grace_seconds
        calls.append(delete_pod(runtime.api, namespace, pod_name, pod.uid if pod else None, grace, why))
    await asyncio.gather(*calls)
    by_why: dict[str, list[int]] = {}
    for pod_name, why in deletes:
        by_why.setdefault(why, []).append(int(pod_name.rsplit("-", 1)[1]))
    for why, indexes in by_why.items():
        post_event(body["metadata"], "Normal", "DeletedWorkers", f"deleted worker pod(s) {shown(indexes)}: {why}")


async def _create_pods(
    runtime: Runtime,
    state: JobRuntime,
    body: dict[str, Any],
    job: RolloutJob,
    uid: str,
    current_hash: str,
    to_create: list[int],
    gate: Gate,
) -> None:
    """Create in growing batches (:func:`.plan.creation_batches`); stop at the first refusal.
    Each created pod is expected (:class:`.observe.Expectation`) until the pod watch has gone
    past the resourceVersion its create was answered with: at 10 000 pods the watch lagged
    by more than a minute, and expectations that ran out by the clock made the next round
    post thousands of them again (answered 409)."""
    created: list[int] = []
    refusal = ""
    for batch in creation_batches(to_create):
        pods = [gate.place(build_pod(job, uid, index, runtime.config, current_hash)) for index in batch]
        outcomes = await asyncio.gather(*(create_pod(runtime.api, pod) for pod in pods))
        clock = time.monotonic()
        for index, outcome in zip(batch, outcomes, strict=True):
            if outcome.uid is not None:
                created.append(index)
                state.memory.note_created(index, outcome.uid, clock, outcome.version)
            elif outcome.refusal is None:  # it exists already (409): the watch lags; expect it, don't post it again
                state.memory.note_created(index, "", clock)
        refused = [index for index, outcome in zip(batch, outcomes, strict=True) if outcome.refusal]
        if refused:
            refusal = next(outcome.refusal for outcome in outcomes if outcome.refusal)
            if refusal != state.reported_refusal:  # once per distinct reason, not on every timer tick
                message = f"the API server refused worker pod(s) {shown(refused)}: {refusal}"
                post_event(body["metadata"], "Warning", "CreateFailed", message)
            break  # the next reconcile tries again; the rest would most likely be refused alike
    state.reported_refusal = refusal
    if created:
        post_event(body["metadata"], "Normal", "CreatedWorkers", f"created worker pod(s) {shown(created)}")


async def _keep_evaluators(
    runtime: Runtime, body: dict[str, Any], job: RolloutJob, uid: str, pods: list[PodView], active: bool, now: float
) -> None:
    """Create and delete evaluation pods as :func:`.evaluators.plan_evaluators` says (an
    Event per batch of them); a refused create is said in an Event and tried next round."""
    current = evaluator_hash(job, runtime.config)
    create, delete = plan_evaluators(job, pods, current, active, now)
    by_name = {p.name: p for p in pods}
    grace = runtime.config.grace_seconds
    await asyncio.gather(*(delete_pod(runtime.api, job.namespace, name, by_name[name].uid,
                                      0 if by_name[name].terminated else grace, why) for name, why in delete))  # fmt: skip
    for name, why in delete:
        post_event(body["metadata"], "Normal", "DeletedEvaluator", f"deleted evaluation pod {name}: {why}")
    pods_made = [build_evaluator_pod(job, uid, index, runtime.config, current) for index in create]
    outcomes = await asyncio.gather(*(create_pod(runtime.api, pod) for pod in pods_made))
    created = [pod["metadata"]["name"] for pod, outcome in zip(pods_made, outcomes, strict=True) if outcome.uid]
    if created:
        post_event(body["metadata"], "Normal", "CreatedEvaluators", f"created evaluation pod(s) {', '.join(created)}")
    if refusal := next((outcome.refusal for outcome in outcomes if outcome.refusal), None):
        post_event(body["metadata"], "Warning", "CreateFailed", f"the API server refused an evaluation pod: {refusal}")


def shown(indexes: Iterable[int], limit: int = 10) -> str:
    """Worker indexes for an Event's message: the first ``limit``, and how many more."""
    listed = list(indexes)
    more = f" and {len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(str(i) for i in listed[:limit]) + more

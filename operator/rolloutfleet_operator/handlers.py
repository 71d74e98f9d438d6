"""The kopf layer: observe RolloutJobs and their pods, run one state-based reconcile.

Every trigger — a RolloutJob created, changed or resumed (``on.event``), one of its pods
changing (``on.event`` on labelled pods), and a timer — leads to the same
:func:`request_reconcile`, which coalesces: while a job's reconcile runs, further
triggers only mark it dirty, and it runs once more. So 1 000 pod events of a large job
cost a handful of reconciles, not 1 000. Pods and jobs are read from kopf indexes (kept
by the watch streams, small :class:`PodView` records), never listed per reconcile.

The reconcile persists restart records in the status *before* it deletes a failed pod,
and creates pods under deterministic names, so an operator killed at any point and
started again neither double-counts a failure nor duplicates a pod.

RBAC this module needs is :data:`rolloutfleet_operator.rbac.RULES`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import random
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, cast

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from rolloutfleet.spec import RolloutJob, SpecError
from rolloutfleet_operator import metrics
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.plan import creation_batches, plan, records_from_status
from rolloutfleet_operator.pods import JOB_LABEL, MANAGED_BY, PodView, build_pod, template_hash
from rolloutfleet_operator.status import build_status, invalid_spec_status

JOBS = ("rolloutfleet.io", "v1alpha1", "rolloutjobs")
POD_FILTER: dict[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    JOB_LABEL: kopf.PRESENT,
}
TIMER_INTERVAL_S = 5.0
SETTLE_S = 0.05  # shortest wait for more events before a reconcile
MAX_SETTLE_S = 2.0
EXPECTATION_TTL_S = 60.0  # a created pod the watch never shows is created again after this
API_CONCURRENCY = 16

log = logging.getLogger(__name__)
Key = tuple[str, str]


@dataclass
class JobRuntime:
    """In-memory companion of one job: coalescing, and what this process saw of its pods."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    dirty: bool = False
    last_seconds: float = 0.0  # how long the last reconcile took
    known: dict[int, str] = field(default_factory=dict)  # index -> uid of the pod last seen
    deleted: set[str] = field(default_factory=set)  # uids this operator deleted
    # index -> (uid, monotonic time) of pods this process created that the watch hasn't
    # shown yet: without it the next reconcile, triggered by the very events of those
    # creations, would find them missing and post them again (answered 409: wasted calls).
    expected: dict[int, tuple[str, float]] = field(default_factory=dict)
    beats: dict[int, dict[str, float]] = field(default_factory=dict)
    reported_invalid: str = ""
    reported_refusal: str = ""
    # The status this process wrote last, with the uid of the job it was written for.
    # The operator is the only writer of status (peering: one active replica), so this
    # is newer than the watch's copy, which can lag behind our own patches; after a
    # restart it is empty and the job's stored status is read instead.
    written: dict[str, Any] | None = None
    written_for: str = ""
    password: tuple[float, str | None] = (0.0, None)


@dataclass
class Runtime:
    config: OperatorConfig
    core: k8s.CoreV1Api
    custom: k8s.CustomObjectsApi
    jobs: dict[Key, JobRuntime] = field(default_factory=dict)
    api_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(API_CONCURRENCY))

    def job(self, key: Key) -> JobRuntime:
        return self.jobs.setdefault(key, JobRuntime())


def _load_kube_config() -> None:
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]


class _NoDiffBase(kopf.DiffBaseStorage):
    """kopf keeps an object's last handled "essence" for on.create/update diffs, and builds
    it on every event by deep-copying the whole body. This operator has no such handlers
    (it reconciles state), so the copy is pure waste: a third of the operator's CPU while
    1 000 pods start."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Each replica draws its own priority: the highest acts, the others stand by (kopf
    # peering keeps going with equal priorities, which would make two replicas act).
    settings.peering.priority = random.randint(1, 2**31 - 1)
    settings.peering.name = "rolloutfleet"
    settings.peering.mandatory = False
    settings.persistence.finalizer = "rolloutfleet.io/operator"
    settings.persistence.diffbase_storage = _NoDiffBase()
    # Our own Events say what we do; kopf's per-handler "succeeded" Events would be noise.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.queueing.worker_limit = 256
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=API_CONCURRENCY + 4))
    _load_kube_config()
    memo.runtime = Runtime(
        config=OperatorConfig.from_environ(os.environ),
        core=k8s.CoreV1Api(),
        custom=k8s.CustomObjectsApi(),
    )


@kopf.index(*JOBS)
def job_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return {
        (namespace or "", name): {
            "metadata": {
                "name": name,
                "namespace": namespace or "",
                "uid": body.metadata.uid,
                "generation": body.metadata.get("generation", 1),
                "deletionTimestamp": body.metadata.get("deletionTimestamp"),
            },
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


@kopf.index("pods", labels=POD_FILTER)
def pod_index(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, PodView] | None:
    view = PodView.from_pod(body)
    return None if view is None else {(namespace or "", labels[JOB_LABEL]): view}


@kopf.on.event(*JOBS)
async def job_changed(*, type: str, namespace: str | None, name: str, memo: Any, **indexes: Any) -> None:
    key = (namespace or "", name)
    if type == "DELETED":
        memo.runtime.jobs.pop(key, None)
        return
    await request_reconcile(key, memo.runtime, indexes["job_index"], indexes["pod_index"])


@kopf.on.event("pods", labels=POD_FILTER)
async def pod_changed(*, namespace: str | None, labels: Mapping[str, str], memo: Any, **indexes: Any) -> None:
    key = (namespace or "", labels[JOB_LABEL])
    await request_reconcile(key, memo.runtime, indexes["job_index"], indexes["pod_index"])


@kopf.timer(*JOBS, interval=TIMER_INTERVAL_S)
async def tick(*, namespace: str | None, name: str, memo: Any, **indexes: Any) -> None:
    runtime: Runtime = memo.runtime
    key = (namespace or "", name)
    if runtime.config.read_progress:
        await _read_progress(key, runtime, indexes["job_index"])
    await request_reconcile(key, runtime, indexes["job_index"], indexes["pod_index"])


async def request_reconcile(
    key: Key, runtime: Runtime, job_index: kopf.Index[Key, Any], pod_index: kopf.Index[Key, Any]
) -> None:
    """Reconcile ``key`` soon, or make the reconcile already pending or running go round
    once more. Each round first waits as long as the last one took (at least
    :data:`SETTLE_S`): the events that arrive meanwhile join that round, so a job of n
    pods costs O(n) per round and a bounded share of the CPU, not O(n) per pod event."""
    state = runtime.job(key)
    state.dirty = True
    if state.lock.locked():
        return
    async with state.lock:
        while state.dirty:
            await asyncio.sleep(max(SETTLE_S, state.last_seconds))
            state.dirty = False
            started = time.perf_counter()
            requeue = await reconcile(key, runtime, job_index, pod_index)
            state.last_seconds = min(time.perf_counter() - started, MAX_SETTLE_S)
            if requeue is not None and requeue <= TIMER_INTERVAL_S:
                await asyncio.sleep(requeue)  # a restart falls due before the next tick
                state.dirty = True


async def reconcile(
    key: Key, runtime: Runtime, job_index: kopf.Index[Key, Any], pod_index: kopf.Index[Key, Any]
) -> float | None:
    bodies = list(job_index.get(key, []))
    if not bodies or bodies[0]["metadata"].get("deletionTimestamp"):
        return None
    body = bodies[0]
    state = runtime.job(key)
    started = time.perf_counter()
    namespace, name = key
    generation = int(body["metadata"]["generation"])
    now = time.time()
    try:
        job = RolloutJob.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": body["spec"]})
    except SpecError as error:
        message = f"spec cannot be used: {error}"
        await _patch_status(runtime, key, body, invalid_spec_status(name, message, generation, now, body["status"]))
        if state.reported_invalid != message:
            state.reported_invalid = message
            kopf.event(_event_target(body), type="Warning", reason="InvalidSpec", message=message)
        return None
    state.reported_invalid = ""

    config = runtime.config
    current_hash = template_hash(job, config)
    uid = str(body["metadata"]["uid"])
    own_status = state.written if state.written is not None and state.written_for == uid else body["status"]
    # A pod this process deleted counts as going away until the watch says so; else the
    # reconcile that the delete's own events trigger would delete it again.
    pods = [
        replace(p, deleting=True) if p.uid in state.deleted and not p.deleting else p for p in pod_index.get(key, [])
    ]
    present = {p.index: p.uid for p in pods}
    vanished = [i for i, uid in state.known.items() if i not in present and uid not in state.deleted]
    the_plan = plan(
        job,
        pods,
        records_from_status(own_status),
        now,
        current_hash,
        max_unavailable=config.max_unavailable,
        vanished=vanished,
    )
    state.known = dict(present)
    state.deleted &= set(present.values())
    clock = time.monotonic()
    state.expected = {
        index: (uid, at)
        for index, (uid, at) in state.expected.items()
        if index not in present and clock - at < EXPECTATION_TTL_S
    }
    to_create = [index for index in the_plan.create if index not in state.expected]

    # Records first: a failure is persisted before its pod is deleted.
    status = build_status(name, job.spec.suspend, the_plan, pods, generation, now, own_status, state.beats)
    await _patch_status(runtime, key, body, status)
    state.written, state.written_for = status, uid
    for event in the_plan.events:
        kopf.event(_event_target(body), type=event.type, reason=event.reason, message=event.message)
        if event.reason in ("WorkerFailed", "RestartBudgetExhausted"):
            metrics.WORKER_FAILURES.inc()
    by_name = {p.name: p for p in pods}
    await asyncio.gather(
        *(
            _delete_pod(runtime, state, namespace, pod_name, why, by_name.get(pod_name))
            for pod_name, why in the_plan.delete
        )
    )
    if the_plan.delete:
        _announce_deletes(body, the_plan.delete)
    # Created pods join ``state.known`` once the watch shows them: only a pod this
    # process has seen can be said to have vanished.
    created: list[int] = []
    refusal = ""
    for batch in creation_batches(to_create):
        outcomes = await asyncio.gather(*(_create_pod(runtime, job, uid, index, current_hash) for index in batch))
        for index, (pod_uid, _) in zip(batch, outcomes, strict=True):
            if pod_uid is not None:
                created.append(index)
                state.expected[index] = (pod_uid, clock)
        refused = [index for index, (_, error) in zip(batch, outcomes, strict=True) if error]
        if refused:
            refusal = next(error for _, error in outcomes if error)
            if refusal != state.reported_refusal:  # once per distinct reason, not on every timer tick
                kopf.event(
                    _event_target(body),
                    type="Warning",
                    reason="CreateFailed",
                    message=f"the API server refused worker pod(s) {_shown(refused)}: {refusal}",
                )
            break  # the next reconcile tries again; the rest would most likely be refused alike
    state.reported_refusal = refusal
    if created:
        kopf.event(
            _event_target(body),
            type="Normal",
            reason="CreatedWorkers",
            message=f"created worker pod(s) {_shown(created)}",
        )
    metrics.RECONCILE_SECONDS.observe(time.perf_counter() - started)
    return the_plan.requeue_after


def _shown(indexes: Iterable[int], limit: int = 10) -> str:
    listed = list(indexes)
    more = f" and {len(listed) - limit} more" if len(listed) > limit else ""
    return ", ".join(str(i) for i in listed[:limit]) + more


def _announce_deletes(body: dict[str, Any], deletes: list[tuple[str, str]]) -> None:
    by_why: dict[str, list[int]] = {}
    for pod_name, why in deletes:
        by_why.setdefault(why, []).append(int(pod_name.rsplit("-", 1)[1]))
    for why, indexes in by_why.items():
        kopf.event(
            _event_target(body),
            type="Normal",
            reason="DeletedWorkers",
            message=f"deleted worker pod(s) {_shown(indexes)}: {why}",
        )


def _event_target(body: dict[str, Any]) -> kopf.Body:
    return cast(
        kopf.Body, {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": body["metadata"]}
    )


def _status_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    # A null in a merge patch deletes the key, so the stored status has no key where
    # ours says null: compare without nulls, or every reconcile would patch again.
    return any(_without_nulls(old.get(k)) != _without_nulls(v) for k, v in new.items())


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


async def _patch_status(runtime: Runtime, key: Key, body: dict[str, Any], status: dict[str, Any]) -> None:
    if not _status_changed(body["status"], status):
        return
    namespace, name = key
    async with runtime.api_slots:
        try:
            await asyncio.to_thread(
                runtime.custom.patch_namespaced_custom_object_status,
                JOBS[0],
                JOBS[1],
                namespace,
                JOBS[2],
                name,
                {"status": status},
            )
        except ApiException as error:
            if error.status != 404:  # the job is gone: nothing to report on
                raise
    body["status"] = {**body["status"], **status}  # until the watch brings the new version


async def _create_pod(
    runtime: Runtime, job: RolloutJob, uid: str, index: int, current_hash: str
) -> tuple[str | None, str | None]:
    """(uid of the pod this call created, the API server's reason for refusing it). An
    existing pod of that name (an earlier reconcile's or operator's) gives neither."""
    pod = build_pod(job, uid, index, runtime.config, current_hash)
    async with runtime.api_slots:
        try:
            # Raw responses: parsing 1 000 full V1Pod models would cost more than the calls.
            response: Any = await asyncio.to_thread(
                runtime.core.create_namespaced_pod, job.namespace, cast(Any, pod), _preload_content=False
            )
        except ApiException as error:
            if error.status == 409:
                return None, None
            if error.status is not None and error.status >= 500:
                raise  # the server's trouble, not the pod's: the reconcile fails and runs again
            return None, _api_reason(error)  # quota, admission, an invalid field: worth an Event
    metrics.PODS_CREATED.inc()
    return str(json.loads(response.data).get("metadata", {}).get("uid", "")), None


def _api_reason(error: ApiException) -> str:
    """The ``message`` of a Kubernetes Status body (what kubectl shows), else the HTTP reason."""
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or f"HTTP {error.status} {error.reason}")


async def _delete_pod(
    runtime: Runtime, state: JobRuntime, namespace: str, name: str, why: str, pod: PodView | None
) -> None:
    if pod is not None:
        state.deleted.add(pod.uid)
    # A terminated pod has nothing left to stop: no grace period to wait out.
    grace = 0 if pod is not None and pod.terminated else runtime.config.grace_seconds
    async with runtime.api_slots:
        try:
            await asyncio.to_thread(
                runtime.core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace,
                body=k8s.V1DeleteOptions(
                    grace_period_seconds=grace,
                    preconditions=k8s.V1Preconditions(uid=pod.uid) if pod is not None else None,
                ),
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409):  # gone already, or replaced meanwhile
                raise
    metrics.PODS_DELETED.labels(why=why.split(";")[0]).inc()
    log.info("deleted pod %s/%s: %s", namespace, name, why)


async def _read_progress(key: Key, runtime: Runtime, job_index: kopf.Index[Key, Any]) -> None:
    """Sampling progress from the workers' heartbeats in Redis (status.envSteps, stepsPerSecond)."""
    from rolloutfleet.heartbeat import read_heartbeats  # redis client: only when progress is read

    bodies = list(job_index.get(key, []))
    if not bodies:
        return
    try:
        job = RolloutJob.from_dict({"metadata": {"name": key[1], "namespace": key[0]}, "spec": bodies[0]["spec"]})
    except SpecError:
        return
    state = runtime.job(key)
    password = await _redis_password(runtime, state, job)
    try:
        state.beats = await asyncio.to_thread(read_heartbeats, job.spec.redis.url, job, password)
    except Exception as error:  # noqa: BLE001 - progress is best effort; the reconcile must go on
        log.debug("no progress for %s/%s: %s", key[0], key[1], error)


async def _redis_password(runtime: Runtime, state: JobRuntime, job: RolloutJob) -> str | None:
    ref = job.spec.redis.password_secret
    if ref is None:
        return None
    fetched_at, cached = state.password
    if time.monotonic() - fetched_at < 60:
        return cached
    try:
        secret = await asyncio.to_thread(runtime.core.read_namespaced_secret, ref.name, job.namespace)
        raw = (secret.data or {}).get(ref.key)
        password = base64.b64decode(raw).decode() if raw else None
    except ApiException:
        password = None
    state.password = (time.monotonic(), password)
    return password

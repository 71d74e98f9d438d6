"""The kopf registrations: what the operator watches, and what each trigger does.

Every trigger — a RolloutJob created, changed or resumed (``on.event``), one of its pods
changing (``on.event`` on labelled pods), and a timer — asks for the same state-based
reconcile (:mod:`.reconcile`), in rounds that coalesce (:mod:`.coalescing`). Pods, jobs
and the jobs' PodDisruptionBudgets are read from kopf indexes (kept by the watch streams,
small records), never listed or read per reconcile.

Importing this module registers the handlers: ``rolloutfleet-operator`` (and the image's
build check) import it as the operator's entry point. RBAC the operator needs is
:data:`rolloutfleet_operator.rbac.RULES`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
from collections.abc import Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import kopf
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from rolloutfleet_operator import metrics
from rolloutfleet_operator.children.evaluators import evaluator_view
from rolloutfleet_operator.children.pods import JOB_LABEL, MANAGED_BY, PodView
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.kueue.admission import WORKLOADS
from rolloutfleet_operator.loop.api_calls import API_CONCURRENCY, JOBS, PDBS, Api
from rolloutfleet_operator.loop.coalescing import run_coalesced
from rolloutfleet_operator.loop.progress import read_progress
from rolloutfleet_operator.loop.reconcile import JobIndex, PdbIndex, PodIndex, WorkloadIndex, reconcile
from rolloutfleet_operator.loop.runtime import Key, Runtime
from rolloutfleet_operator.redis.stream_metrics import read_stream_metrics
from rolloutfleet_operator.scaling.autoscale_tick import autoscale

POD_FILTER: dict[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    JOB_LABEL: kopf.PRESENT,
}
TIMER_INTERVAL_S = 5.0
WORKER_LIMIT = 2048  # kopf's per-object workers alive at once (see startup)
WORKER_IDLE_S = 1.0  # ... and how long one waits for its object's next event
# A deleted job keeps kopf's finalizer until its timer has returned. A tick caught mid-call
# (a Redis read, a reconcile) made kopf look again only after its default 60 s, so the
# job and its pods outlived ``kubectl delete`` by a minute; now it looks every second.
TIMER_STOP_POLL_S = 1.0
log = logging.getLogger(__name__)


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


def _load_kube_config() -> None:
    try:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except k8s_config.ConfigException:
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]


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
    settings.background.cancellation_polling = TIMER_STOP_POLL_S
    # kopf runs one worker per object, alive until idle_timeout after its last event, and
    # stops reading the watch while worker_limit are alive: the pair caps the objects whose
    # events it takes a second. 256 and kopf's 5 s capped it at ~51 pods/s, and the pod
    # watch lagged minutes behind a 10 000-pod start. Now ~2 000/s, and at most 2 048 workers.
    settings.queueing.worker_limit = WORKER_LIMIT
    settings.queueing.idle_timeout = WORKER_IDLE_S
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=API_CONCURRENCY + 4))
    _load_kube_config()
    # As many pooled connections as calls in flight: urllib3's default pool (10) is smaller
    # than API_CONCURRENCY, and each call past it opened (TLS handshake) and dropped a connection.
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = API_CONCURRENCY + 4
    client = k8s.ApiClient(configuration)
    memo.runtime = Runtime(
        config=OperatorConfig.from_environ(os.environ),
        api=Api(
            core=k8s.CoreV1Api(client),
            custom=k8s.CustomObjectsApi(client),
            policy=k8s.PolicyV1Api(client),
            networking=k8s.NetworkingV1Api(client),
        ),
    )
    # The modules loaded so far (kopf, the kubernetes client's models, pydantic) are a few
    # hundred thousand objects that live as long as the process: out of the collector's
    # sight, each full collection (they come as a big job's pods are indexed) scans less.
    gc.freeze()


# The index functions are coroutines, not plain functions: kopf runs a plain one in a thread
# (a hop, a context copy and a shielded task per watch event), which at 10 000 pods cost
# more than the indexing itself.
@kopf.index(*JOBS)
async def job_index(*, namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Key, dict[str, Any]]:
    return {
        (namespace or "", name): {
            "metadata": {
                "name": name,
                "namespace": namespace or "",
                "uid": body.metadata.uid,
                "labels": dict(body.metadata.labels),
                "annotations": dict(body.metadata.annotations),  # kueue.x-k8s.io/elastic-job
                "generation": body.metadata.get("generation", 1),
                "deletionTimestamp": body.metadata.get("deletionTimestamp"),
            },
            "spec": dict(body.spec),
            "status": dict(body.status),
        }
    }


@kopf.index("pods", labels=POD_FILTER)
async def pod_index(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, PodView] | None:
    view = PodView.from_pod(body) or evaluator_view(body)
    return None if view is None else {(namespace or "", labels[JOB_LABEL]): view}


# Kueue's Workloads of our jobs: admission, eviction. Where Kueue is not installed kopf
# watches nothing here (the index stays empty) and starts once the CRD appears.
@kopf.index(*WORKLOADS, labels={JOB_LABEL: kopf.PRESENT})
async def workload_index(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, dict[str, Any]]:
    meta = body.metadata
    fields = {"name": meta.name, "namespace": namespace or "", "uid": meta.uid, "labels": dict(labels),
              "resourceVersion": meta.get("resourceVersion"), "generation": meta.get("generation", 1),
              "deletionTimestamp": meta.get("deletionTimestamp"),
              "annotations": {k: v for k, v in meta.annotations.items() if k.startswith("kueue.x-k8s.io/")}}  # fmt: skip
    return {
        (namespace or "", labels[JOB_LABEL]): {"metadata": fields, "spec": dict(body.spec), "status": dict(body.status)}
    }


@kopf.on.event(*WORKLOADS, labels={JOB_LABEL: kopf.PRESENT})
async def workload_changed(*, namespace: str | None, labels: Mapping[str, str], memo: Any, **indexes: Any) -> None:
    key = (namespace or "", labels[JOB_LABEL])
    await request_reconcile(
        key, memo.runtime, indexes["job_index"], indexes["pod_index"], indexes["workload_index"], indexes["pdb_index"]
    )


@kopf.index(*PDBS, labels=POD_FILTER)
async def pdb_index(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[Key, dict[str, Any]]:
    owners = [o.get("uid") for o in body.metadata.get("ownerReferences") or []]
    return {(namespace or "", labels[JOB_LABEL]): {"owners": owners, "spec": dict(body.spec)}}


@kopf.on.event(*JOBS)
async def job_changed(*, type: str, namespace: str | None, name: str, memo: Any, **indexes: Any) -> None:
    key = (namespace or "", name)
    if type == "DELETED":
        memo.runtime.jobs.pop(key, None)
        return
    # Apart from kopf's handling of this event: kopf adds its finalizer after this handler,
    # by a JSON patch that tests the resourceVersion the event brought, and holds the job's
    # next events (its index entry too) until then. Run here, the rounds of a 10 000-pod
    # start held it for minutes: their status patches made each finalizer patch fail (HTTP
    # 422, 44 in one run) and a spec change waited for the start to end.
    _in_background(
        request_reconcile(
            key, memo.runtime, indexes["job_index"], indexes["pod_index"], indexes["workload_index"],
            indexes["pdb_index"],
        )
    )  # fmt: skip


_BACKGROUND: set[asyncio.Task[None]] = set()  # held here: the event loop keeps only weak references


def _in_background(rounds: Coroutine[Any, Any, None]) -> None:
    task = asyncio.create_task(rounds)
    _BACKGROUND.add(task)
    task.add_done_callback(_finished)


def _finished(task: asyncio.Task[None]) -> None:
    _BACKGROUND.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("reconcile failed (the next event or tick tries again): %s", error, exc_info=error)


@kopf.on.event("pods", labels=POD_FILTER)
async def pod_changed(
    *, type: str, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, memo: Any, **indexes: Any
) -> None:
    key = (namespace or "", labels[JOB_LABEL])
    memo.runtime.note_pod_version(key[0], body.metadata.get("resourceVersion"))  # the index has this pod now
    state = memo.runtime.jobs.get(key)  # none for a deleted job's pods: nothing to remember
    if type == "DELETED" and state is not None and (view := PodView.from_pod(body)) is not None:
        state.memory.note_gone(view)  # its final state may say why it went
    await request_reconcile(
        key, memo.runtime, indexes["job_index"], indexes["pod_index"], indexes["workload_index"], indexes["pdb_index"]
    )


@kopf.timer(*JOBS, interval=TIMER_INTERVAL_S)
async def tick(*, namespace: str | None, name: str, memo: Any, **indexes: Any) -> None:
    runtime: Runtime = memo.runtime
    key = (namespace or "", name)
    stopped: kopf.DaemonStopped = indexes["stopped"]  # kopf's: set once the job is deleted
    if runtime.config.read_progress:
        # Each step may wait seconds on a Redis that hangs; a job deleted meanwhile (kopf
        # sets ``stopped``) waits for this tick to return, so the rest is skipped.
        for step in (read_progress, read_stream_metrics, autoscale):  # autoscale: spec.autoscaling's jobs only
            if stopped:
                return
            await step(key, runtime, indexes["job_index"])
    if stopped:
        return
    await request_reconcile(
        key, runtime, indexes["job_index"], indexes["pod_index"], indexes["workload_index"], indexes["pdb_index"]
    )


async def request_reconcile(
    key: Key,
    runtime: Runtime,
    job_index: JobIndex,
    pod_index: PodIndex,
    workload_index: WorkloadIndex,
    pdb_index: PdbIndex,
) -> None:
    """Reconcile ``key`` soon, coalesced with the other triggers of that job. A restart
    due before the next tick is waited for by the rounds; later ones, by the timer."""

    async def counted_round() -> float | None:
        try:
            return await reconcile(key, runtime, job_index, pod_index, workload_index, pdb_index)
        except Exception:
            metrics.RECONCILE_ERRORS.inc()
            raise

    await run_coalesced(runtime.job(key).rounds, counted_round, requeue_within_s=TIMER_INTERVAL_S)

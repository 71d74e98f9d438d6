"""The autoscaler on the operator's timer: read the job's signals from Redis (best effort,
as :mod:`.progress` reads heartbeats), let the rule decide (:mod:`rolloutfleet.rules.autoscaler`),
and say each change once: an Event ``Scaled`` with the reason in words, one log line, and
the signals as Prometheus gauges (:mod:`.metrics`). The reconcile that follows carries the
size out (:mod:`.reconcile`); a Redis that cannot be read holds the size and says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from rolloutfleet.spec.job import SpecError
from rolloutfleet.transport.appetite import read_signals
from rolloutfleet_operator import metrics
from rolloutfleet_operator.loop.api_calls import post_event
from rolloutfleet_operator.loop.progress import redis_login
from rolloutfleet_operator.loop.runtime import Key, Runtime
from rolloutfleet_operator.redis.defaults import job_of
from rolloutfleet_operator.scaling.scale import Scaling, sync_scaling

log = logging.getLogger(__name__)


async def autoscale(
    key: Key, runtime: Runtime, job_index: Mapping[Key, Collection[dict[str, Any]]], now: float | None = None
) -> None:
    """One look at an autoscaled job's signals and one decision (nothing for other jobs);
    ``now``: the autoscaler's clock (monotonic seconds)."""
    now = time.monotonic() if now is None else now
    bodies = list(job_index.get(key, []))
    if not bodies or bodies[0]["metadata"].get("deletionTimestamp"):
        return
    body = bodies[0]
    try:
        job = job_of(key, body["spec"], runtime.config)
    except SpecError:
        return
    state = runtime.job(key)
    own_status = state.written if state.written is not None else body["status"]
    scaling = state.scaling = sync_scaling(state.scaling, job, own_status, now)
    if scaling is None or job.spec.suspend:
        return
    url, password = await redis_login(runtime, state, job)
    signals = await asyncio.to_thread(read_signals, url, job, password)
    scaling.decision = scaling.autoscaler.observe(signals, now)
    announce(body, key, scaling)


def announce(body: Mapping[str, Any], key: Key, scaling: Scaling) -> None:
    """Say the current decision if it is a change not said yet; keep the gauges current."""
    decision = scaling.decision
    if decision is None:
        return
    labels = {"namespace": key[0], "job_name": key[1]}
    metrics.DESIRED_REPLICAS.labels(**labels).set(decision.replicas)
    for gauge, value in (
        (metrics.LEARNER_STARVED, decision.starved_ratio),
        (metrics.WORKERS_BLOCKED, decision.blocked_ratio),
        (metrics.LEARNER_ROWS, decision.learner_rows_per_s),
        (metrics.WORKER_ROWS, decision.worker_rows_per_s),
    ):
        if value is not None:
            gauge.labels(**labels).set(value)
    if not decision.changed or scaling.announced is decision:
        return
    scaling.announced = decision
    scaling.last_scale_time = time.time()
    metrics.SCALE_CHANGES.labels(**labels).inc()
    log.info("%s/%s: %s", key[0], key[1], decision.reason)
    post_event(body["metadata"], "Normal", "Scaled", decision.reason)

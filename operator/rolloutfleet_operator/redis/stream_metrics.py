"""A job's batch streams and its learners' consumer groups as Prometheus gauges (:mod:`.metrics`):
entries in the stream, and per group the entries not yet delivered (lag), delivered and not
acknowledged (pending), and read since the stream began. Read on the operator's timer, as
:mod:`.progress` reads heartbeats: once per job, a fixed number of Redis round trips whatever
its number of workers (:mod:`rolloutfleet.transport.redis.stream_backlog`). Best effort: a Redis that
cannot be read drops the job's series until it can (a gap on a graph, not a frozen number).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from rolloutfleet.spec.job import SpecError
from rolloutfleet.transport.redis.stream_backlog import PolicyBacklog, read_job_backlog
from rolloutfleet_operator import metrics
from rolloutfleet_operator.loop.progress import redis_login
from rolloutfleet_operator.loop.runtime import Key, Runtime
from rolloutfleet_operator.redis.defaults import job_of

log = logging.getLogger(__name__)


async def read_stream_metrics(key: Key, runtime: Runtime, job_index: Mapping[Key, Collection[dict[str, Any]]]) -> None:
    """Read the job's streams and set (or drop) its stream gauges."""
    bodies = list(job_index.get(key, []))
    if not bodies or bodies[0]["metadata"].get("deletionTimestamp"):
        return  # the reconcile forgets a deleted job's series
    try:
        job = job_of(key, bodies[0]["spec"], runtime.config)
    except SpecError:
        return
    backlogs: list[PolicyBacklog] = []
    try:
        url, password = await redis_login(runtime, runtime.job(key), job)
        backlogs = await asyncio.to_thread(read_job_backlog, url, job, password)
    except Exception as error:  # noqa: BLE001 - best effort, as progress: the reconcile must go on
        log.debug("no stream metrics for %s/%s: %s", key[0], key[1], error)
    metrics.set_stream_series(key[0], key[1], stream_series(backlogs))


def stream_series(backlogs: Sequence[PolicyBacklog]) -> dict[metrics.StreamSeries, float]:
    """The gauges' values: (gauge, label values after namespace and job_name) -> value."""
    values: dict[metrics.StreamSeries, float] = {}
    for backlog in backlogs:
        policy = backlog.policy or ""
        values[metrics.STREAM_ENTRIES, (policy,)] = backlog.entries
        for group in backlog.groups:
            labels = (policy, group.name)
            values[metrics.GROUP_PENDING, labels] = group.pending
            if group.lag is not None:
                values[metrics.GROUP_LAG, labels] = group.lag
            if group.entries_read is not None:
                values[metrics.GROUP_ENTRIES_READ, labels] = group.entries_read
    return values

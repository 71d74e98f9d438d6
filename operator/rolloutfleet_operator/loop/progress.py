"""Sampling progress of a job's workers, read from their heartbeats in Redis.

Best effort, on the timer: the heartbeats end up in ``status.envSteps`` and
``status.stepsPerSecond`` (:func:`.status.progress`), and a job whose Redis cannot be
reached is reconciled all the same. Every :data:`CLIENTS_EVERY_S` the operator also looks at the
job's Redis itself: its connection budget (``INFO clients``, :func:`.status.connections_condition`),
or why it cannot be reached (:func:`.status.reachable_condition`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.parse
from collections.abc import Collection, Mapping
from typing import Any

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet_operator.loop.api_calls import read_secret_value
from rolloutfleet_operator.loop.runtime import JobRuntime, Key, Runtime
from rolloutfleet_operator.redis.defaults import job_of

PASSWORD_TTL_S = 60.0  # a rotated password is picked up within this; no Secret read per tick
CLIENTS_EVERY_S = 15.0  # a look at the job's Redis (reached? INFO clients), this often

log = logging.getLogger(__name__)


async def read_progress(key: Key, runtime: Runtime, job_index: Mapping[Key, Collection[dict[str, Any]]]) -> None:
    """Keep the job's last heartbeats in its :class:`.runtime.JobRuntime` (``beats``)."""
    from rolloutfleet.league.standings import parse_standings
    from rolloutfleet.transport.evaluation_results import read_latest
    from rolloutfleet.transport.heartbeat import read_heartbeats  # redis client: only when progress is read
    from rolloutfleet.transport.league_standings import read_standings_json
    from rolloutfleet.transport.redis.clients import look

    bodies = list(job_index.get(key, []))
    if not bodies:
        return
    try:
        job = job_of(key, bodies[0]["spec"], runtime.config)
    except SpecError:
        return
    state = runtime.job(key)
    url, password = await redis_login(runtime, state, job)
    try:
        if (clock := time.monotonic()) - state.clients[0] >= CLIENTS_EVERY_S:
            seen = await asyncio.to_thread(look, url, password)
            state.clients = (clock, seen.limit if seen.limit is not None else state.clients[1])
            state.redis_error = seen.error
        state.beats = await asyncio.to_thread(read_heartbeats, url, job, password)
        if job.spec.evaluation is not None:
            state.evaluation = await asyncio.to_thread(read_latest, url, job, password)
        if job.spec.league is not None:
            state.league = parse_standings(await asyncio.to_thread(read_standings_json, url, job, password))
    except Exception as error:  # noqa: BLE001 - progress is best effort; the reconcile must go on
        log.debug("no progress for %s/%s: %s", key[0], key[1], error)


async def redis_login(runtime: Runtime, state: JobRuntime, job: RolloutJob) -> tuple[str, str | None]:
    """The URL and password to read the job's keys with: as its learner user where the operator
    minted the job's users (:mod:`.redis_users`), else the job's URL and passwordSecret."""
    login = getattr(state.redis_users, "learner_login", None)
    if login is not None:
        scheme, _, rest = job.spec.redis.url.partition("://")
        return f"{scheme}://{urllib.parse.quote(login[0], safe='')}@{rest}", login[1]
    return job.spec.redis.url, await redis_password(runtime, state, job)


async def redis_password(runtime: Runtime, state: JobRuntime, job: RolloutJob) -> str | None:
    """The password of the job's Redis, from its Secret, read at most every :data:`PASSWORD_TTL_S`."""
    ref = job.spec.redis.password_secret
    if ref is None:
        return None
    fetched_at, cached = state.password
    if time.monotonic() - fetched_at < PASSWORD_TTL_S:
        return cached
    password = await read_secret_value(runtime.api, job.namespace, ref.name, ref.key)
    state.password = (time.monotonic(), password)
    return password

"""A job's stream as ``rolloutfleet streams`` shows it: length, groups (pending, lag,
consumers, idle time), dead letters, the published weights version, and who holds the
workers back under ``block`` backpressure."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import redis

from rolloutfleet.transport.redis.connection import node_client
from rolloutfleet.transport.redis.keys import JobKeys
from rolloutfleet.transport.redis.stream_backlog import group_backlog
from rolloutfleet.transport.redis.stream_load import group_idle_ms


@dataclass(frozen=True)
class GroupStatus:
    name: str
    consumers: int
    pending: int
    undelivered: int | None
    """Entries not yet delivered to the group (XINFO lag); None when Redis cannot tell."""
    oldest_pending_age_s: float | None
    idle_s: float | None = None
    """Seconds since it was last seen reading (:mod:`rolloutfleet.transport.redis.backpressure`); None: never.
    Backpressure ignores a group idle for longer than the workers' ``learner_idle_s``."""


@dataclass(frozen=True)
class Hold:
    """Workers waiting on ``block`` backpressure for over a second, as they recorded it."""

    group: str | None
    """The learner group not keeping up; None: no group is a learner's (none has read recently)."""
    since: float
    """Unix time (Redis's clock) the earliest of the workers waiting on ``group`` began to wait."""
    held_s: float
    """How long that is ago, when the status was read."""
    unconsumed: int
    max_len: int
    ignored: tuple[str, ...]
    """Groups left out (idle for over ``learner_idle_s``)."""
    learner_idle_s: float


@dataclass(frozen=True)
class StreamStatus:
    """One job's stream as ``rolloutfleet streams`` shows it."""

    namespace: str
    job: str
    length: int
    dead_letters: int
    weights_seq_no: int | None
    groups: list[GroupStatus] = field(default_factory=list)
    hold: Hold | None = None
    """Who holds the workers back and since when, while they wait."""
    shard: int = 0
    shards: int = 1
    """Which of the job's batch streams this is (``spec.redis.shards``)."""


def read_stream_status(client: redis.Redis, keys: JobKeys) -> StreamStatus:
    """Length, groups (pending, lag, consumers, age of the oldest pending, idle time), dead
    letters, and who holds the workers back if they wait."""
    version = client.get(keys.weights_version)  # the job's slot (on a cluster, maybe another node)
    client = node_client(client, keys.batches)  # the stream and its companions share a slot
    pipe = client.pipeline(transaction=False)
    pipe.xlen(keys.batches)
    pipe.xinfo_groups(keys.batches)
    pipe.xlen(keys.dead_letters)
    pipe.time()
    pipe.hgetall(keys.backpressure)
    pipe.hgetall(keys.learners)
    length, groups, dead, now, hold, reading = pipe.execute(raise_on_error=False)
    groups = [] if isinstance(groups, Exception) else groups
    now_ms = now[0] * 1000 + now[1] // 1000 if isinstance(now, tuple | list) else time.time() * 1000
    names = [as_text(group["name"]) for group in groups]
    consumers = [
        client.xinfo_consumers(keys.batches, name) if int(g["consumers"]) else []
        for name, g in zip(names, groups, strict=True)
    ]
    idle_ms = group_idle_ms(names, consumers, reading, now)
    statuses = []
    for group in groups:
        backlog = group_backlog(group)
        name = backlog.name
        age = None
        if backlog.pending:
            summary = client.xpending(keys.batches, name)
            oldest = summary.get("min")
            if oldest:
                oldest_ms = int((oldest.decode() if isinstance(oldest, bytes) else oldest).split("-")[0])
                age = max(0.0, (now_ms - oldest_ms) / 1000)
        idle = idle_ms[name]
        statuses.append(
            GroupStatus(
                name,
                int(group["consumers"]),
                backlog.pending,
                backlog.lag,
                age,
                None if idle is None else idle / 1000,
            )
        )
    return StreamStatus(
        keys.namespace,
        keys.job,
        0 if isinstance(length, Exception) else int(length),
        0 if isinstance(dead, Exception) else int(dead),
        weights_version(version),
        statuses,
        _hold(hold, now_ms),
        keys.shard_index,
        keys.shards,
    )


def read_hold(client: redis.Redis, keys: JobKeys) -> Hold | None:
    """Who holds the workers of ``keys``' stream back, while they wait (one round trip)."""
    pipe = node_client(client, keys.batches).pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(keys.backpressure)
    now, raw = pipe.execute()
    return _hold(raw, now[0] * 1000 + now[1] // 1000)


def _hold(raw: Any, now_ms: float) -> Hold | None:
    if not raw or isinstance(raw, Exception):
        return None
    fields = {as_text(k): as_text(v) for k, v in raw.items()}
    try:
        return Hold(
            group=fields.get("group") or None,
            since=int(fields["since"]) / 1000,
            held_s=max(0.0, (now_ms - int(fields["since"])) / 1000),
            unconsumed=int(fields["unconsumed"]),
            max_len=int(fields["max_len"]),
            ignored=tuple(name for name in fields.get("ignored", "").split(",") if name),
            learner_idle_s=float(fields.get("learner_idle_s", "nan")),
        )
    except (KeyError, ValueError):
        return None  # half-written by a worker of another version: show nothing rather than fail


def weights_version(raw: Any) -> int | None:
    """The version number of a raw ``weights_version`` value (None: no weights yet)."""
    if not raw or isinstance(raw, Exception):
        return None
    return int(raw.split()[0])


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

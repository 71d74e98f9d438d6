"""Where a league's standings live in the job's Redis, and the operator's read of them: one
GET of one small JSON value, ``<job tag>:league:standings``, written by the learner's
:meth:`~rolloutfleet.league.store.PolicyStore.publish_standings` and parsed by
:class:`~rolloutfleet.league.standings.Standings` (JSON only, never pickle)."""

from __future__ import annotations

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import RETRYABLE, connect
from rolloutfleet.transport.redis.keys import job_keys


def standings_key(tag: str) -> str:
    return f"{tag}:league:standings"


def read_standings_json(redis_url: str, job: RolloutJob, password: str | None = None) -> str | None:
    """The standings the learner published last, as written; None when there are none or
    Redis is away."""
    try:
        client = connect(redis_url, password, socket_timeout=2.0, connect_timeout=1.0)
    except RETRYABLE:
        return None
    try:
        raw = client.get(standings_key(job_keys(job.namespace, job.name).tag))
    except RETRYABLE:
        return None
    finally:
        client.close()
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)

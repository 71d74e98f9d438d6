"""The autoscaler's signals in Redis (:mod:`rolloutfleet.rules.autoscale_signals`): a learner writes its
appetite, the operator and ``rolloutfleet run`` read everything in one look.

:func:`read_signals` never raises for Redis: an unreachable or failing Redis comes back as
``Signals(error=...)``, on which the autoscaler holds the size and says why. It imports no
sampling or batch code (the operator uses it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rolloutfleet.rules.autoscale_signals import (
    APPETITE_SCRIPT,
    AppetiteMeter,
    Signals,
    last_read_ms,
    parse_appetite,
    worker_samples,
)
from rolloutfleet.transport.heartbeat import parse_heartbeats
from rolloutfleet.transport.redis.backpressure import LEARNERS_TTL_MS
from rolloutfleet.transport.redis.connection import RETRYABLE, connect
from rolloutfleet.transport.redis.keys import JobKeys
from rolloutfleet.transport.redis.stream_backlog import stream_keys

if TYPE_CHECKING:
    from rolloutfleet.spec.job import RolloutJob
    from rolloutfleet.transport.redis.errors import Client


class AppetiteWriter:
    """Writes one consumer's :class:`AppetiteMeter` into the job's ``appetite`` hash."""

    def __init__(self, client: Client, keys: JobKeys, group: str, consumer: str) -> None:
        self.meter = AppetiteMeter()
        self.field = f"{group}/{consumer}"
        self.key = keys.appetite
        self._script = client.register_script(APPETITE_SCRIPT)

    def write(self) -> None:
        self._script(keys=[self.key], args=[self.field, self.meter.payload(time.monotonic()), LEARNERS_TTL_MS])


def read_signals(redis_url: str, job: RolloutJob, password: str | None = None, timeout_s: float = 2.0) -> Signals:
    """Learners' appetite and read stamps, workers' heartbeats and Redis's clock: one round trip
    (a Redis Cluster: one per slot). ``Signals(error=...)`` when Redis cannot be read."""
    try:
        client = connect(redis_url, password, socket_timeout=timeout_s, connect_timeout=timeout_s)
    except RETRYABLE as exc:
        return Signals(now=time.time(), error=f"redis unreachable: {exc}")
    try:
        return _read(client, job)
    except RETRYABLE as exc:
        return Signals(now=time.time(), error=f"redis unreachable: {exc}")
    except Exception as exc:  # noqa: BLE001 - a refused command (ACL, a wrong type) is said, never raised
        return Signals(now=time.time(), error=f"redis refused the read: {exc}")
    finally:
        client.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(client: Any, job: RolloutJob) -> Signals:
    streams = stream_keys(job)  # the streams whose learners count: one per published policy
    now = client.time()
    stamps: dict[Any, Any] = {}
    appetite: dict[Any, Any] = {}
    for keys in streams:
        # The learners hash follows the stream's slot; shard 0 is the one every consumer stamps.
        stamps.update({f"{keys.policy}:{k!r}": v for k, v in (client.hgetall(keys.learners) or {}).items()})
        prefix = "" if keys.policy is None else f"{keys.policy}:"  # each policy's stream has its own appetite
        appetite.update({prefix + _text(k): v for k, v in (client.hgetall(keys.appetite) or {}).items()})
    beats = parse_heartbeats(client.hgetall(streams[0].heartbeats) or {})
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    learners = parse_appetite(appetite)
    last = last_read_ms(stamps, learners)
    return Signals(
        now=now_ms / 1000.0,
        learners=tuple(learners),
        last_read_age_s=None if last is None else max(0.0, (now_ms - last) / 1000.0),
        workers=tuple(worker_samples(beats)),
    )

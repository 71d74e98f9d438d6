"""How many batch streams a job has (``spec.redis.shards``), and which one a worker writes.

A plain Redis: one stream, unless the spec asks for more. A Redis Cluster: by default one
per master, at most :data:`DEFAULT_SHARDS_CAP`. Worker ``i`` writes shard ``i % shards``
(so with ``shards`` dividing the replicas each shard gets the same number of workers).
Workers record the number they use in the job's ``shards`` key whenever it is not what a
learner would work out by itself, and learners follow that key (see
:mod:`rolloutfleet.transport.redis.keys` for the key names).

    >>> shard_of(worker_index=4, shards=3)
    1
"""

from __future__ import annotations

from typing import Any, cast

import redis

from rolloutfleet.transport.redis.connection import is_cluster
from rolloutfleet.transport.redis.keys import JobKeys

DEFAULT_SHARDS_CAP = 16
"""``spec.redis.shards`` unset on a Redis Cluster: one shard per master, at most this many."""


def shard_of(worker_index: int, shards: int) -> int:
    """The shard worker ``worker_index`` writes."""
    return worker_index % shards


def masters(client: redis.Redis) -> int:
    """The masters serving slots (1 for a plain Redis)."""
    if not is_cluster(client):
        return 1
    return max(1, len(cast(Any, client).get_primaries()))


def default_shards(client: redis.Redis) -> int:
    """The shards of a job whose spec does not say: one per master, capped."""
    return min(masters(client), DEFAULT_SHARDS_CAP)


def record_shards(client: redis.Redis, keys: JobKeys, requested: int | None) -> int:
    """The job's shard count for a worker (``requested``, else the default), recorded for
    learners when it differs from the default (and the record dropped when it does not)."""
    default = default_shards(client)
    shards = default if requested is None else requested
    if shards == default:
        client.delete(keys.shards_key)
    else:
        client.set(keys.shards_key, shards)
    return shards


def read_shards(client: redis.Redis, keys: JobKeys) -> int:
    """The job's shard count for a learner: what the workers recorded, else the default."""
    raw = client.get(keys.shards_key)
    if raw is None:
        return default_shards(client)
    try:
        return max(1, int(raw))
    except ValueError:
        return default_shards(client)

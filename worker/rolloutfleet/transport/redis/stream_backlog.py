"""How far behind a job's learners are, read in a fixed number of round trips: per batch
stream of the job (one per trained policy) its length, and per consumer group the entries
not yet delivered (XINFO GROUPS ``lag``) and delivered but not acknowledged (``pending``),
each summed over the stream's shards. The operator exports them as gauges
(``rolloutfleet_operator.redis.stream_metrics``); ``rolloutfleet streams`` prints the same numbers
per shard (:mod:`.stream_status`, which parses groups with :func:`group_backlog`).

Round trips per job, whatever its number of workers: one for the shard counts, then one per
Redis node holding its streams (XLEN and XINFO GROUPS of each, pipelined): two on a plain Redis.

    read_backlog(client, stream_keys(job))   # doctest: +SKIP
    [PolicyBacklog(policy=None, entries=812, groups=(GroupBacklog('learner', pending=4, lag=300, entries_read=9100),))]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rolloutfleet.transport.redis.connection import connect, node_client
from rolloutfleet.transport.redis.keys import JobKeys, job_keys
from rolloutfleet.transport.redis.sharding import default_shards

if TYPE_CHECKING:
    import redis

    from rolloutfleet.spec.job import RolloutJob


@dataclass(frozen=True)
class GroupBacklog:
    name: str
    pending: int
    """Delivered to a consumer of the group, not acknowledged yet (XINFO GROUPS ``pending``)."""
    lag: int | None
    """In the stream, not yet delivered to the group (XINFO GROUPS ``lag``); None when Redis
    cannot tell (entries deleted past the group's position, a group made at an arbitrary id)."""
    entries_read: int | None = None
    """Entries delivered to the group since the stream began (XINFO GROUPS ``entries-read``);
    None when Redis cannot tell."""


@dataclass(frozen=True)
class PolicyBacklog:
    policy: str | None
    """A multi-agent job's policy id; None for a single-agent job."""
    entries: int
    groups: tuple[GroupBacklog, ...]


def stream_keys(job: RolloutJob) -> list[JobKeys]:
    """The job's batch streams, one per published policy (:attr:`RolloutJob.published_policies`)."""
    return [job_keys(job.namespace, job.name, policy) for policy in job.published_policies]


def group_backlog(raw: Mapping[Any, Any]) -> GroupBacklog:
    """One entry of XINFO GROUPS as redis-py returns it.

    >>> group_backlog({"name": b"learner", "consumers": 1, "pending": 3, "entries-read": 40, "lag": 7})
    GroupBacklog(name='learner', pending=3, lag=7, entries_read=40)
    """
    name = raw["name"]
    return GroupBacklog(
        name.decode() if isinstance(name, bytes) else str(name),
        int(raw["pending"]),
        _count(raw.get("lag")),
        _count(raw.get("entries-read")),
    )


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def merge_shards(policy: str | None, shards: Iterable[tuple[int, Sequence[GroupBacklog]]]) -> PolicyBacklog:
    """One policy's backlog from its shards' ``(length, groups)``: lengths and counts summed, a
    group's lag (entries read) unknown if any shard's is (a group missing on a shard adds nothing).

    >>> merge_shards(None, [(5, [GroupBacklog("g", 1, 2, 8)]), (4, [GroupBacklog("g", 0, None, 3)])])
    PolicyBacklog(policy=None, entries=9, groups=(GroupBacklog(name='g', pending=1, lag=None, entries_read=11),))
    """
    entries = 0
    groups: dict[str, GroupBacklog] = {}
    for length, shard_groups in shards:
        entries += length
        for group in shard_groups:
            seen = groups.get(group.name)
            if seen is not None:
                group = GroupBacklog(
                    group.name,
                    seen.pending + group.pending,
                    _add(seen.lag, group.lag),
                    _add(seen.entries_read, group.entries_read),
                )
            groups[group.name] = group
    return PolicyBacklog(policy, entries, tuple(groups[name] for name in sorted(groups)))


def read_backlog(client: redis.Redis, streams: Sequence[JobKeys]) -> list[PolicyBacklog]:
    """Every stream's backlog (see the module doc for the round trips). A stream that does not
    exist yet counts 0 entries and no group; other Redis errors raise."""
    counts = node_client(client, streams[0].shards_key).pipeline(transaction=False)
    for keys in streams:
        counts.get(keys.shards_key)  # the job's own slot: one node holds every policy's count
    recorded = counts.execute()
    default = default_shards(client) if any(raw is None for raw in recorded) else 1
    shard_keys = [keys.all_shards(_shards(raw, default)) for keys, raw in zip(streams, recorded, strict=True)]
    by_node: dict[int, tuple[Any, list[JobKeys]]] = {}
    for keys in (k for policy in shard_keys for k in policy):
        node = node_client(client, keys.batches)
        by_node.setdefault(id(node), (node.pipeline(transaction=False), []))[1].append(keys)
    read: dict[str, tuple[int, list[GroupBacklog]]] = {}
    for pipe, keys_on_node in by_node.values():
        for keys in keys_on_node:
            pipe.xlen(keys.batches)
            pipe.xinfo_groups(keys.batches)
        replies = pipe.execute(raise_on_error=False)
        for i, keys in enumerate(keys_on_node):
            read[keys.batches] = _stream(replies[2 * i], replies[2 * i + 1])
    return [merge_shards(policy[0].policy, [read[keys.batches] for keys in policy]) for policy in shard_keys if policy]


def _shards(raw: Any, default: int) -> int:
    try:
        return max(1, int(raw)) if raw is not None else default
    except ValueError:
        return default


def _stream(length: Any, groups: Any) -> tuple[int, list[GroupBacklog]]:
    if isinstance(groups, Exception):
        if "no such key" not in str(groups).lower():
            raise groups
        return 0, []  # no stream yet: XLEN says 0 too
    if isinstance(length, Exception):
        raise length
    return int(length), [group_backlog(group) for group in groups]


def read_job_backlog(
    redis_url: str, job: RolloutJob, password: str | None = None, timeout_s: float = 2.0
) -> list[PolicyBacklog]:
    """:func:`read_backlog` of ``job``'s streams over a connection of its own (raises what Redis raises)."""
    client = connect(redis_url, password, socket_timeout=timeout_s, connect_timeout=timeout_s)
    try:
        return read_backlog(client, stream_keys(job))
    finally:
        client.close()

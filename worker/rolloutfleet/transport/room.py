"""Making room in a Redis that is out of memory (``maxmemory`` reached, policy ``noeviction``).

Redis then refuses every command that may take memory (XADD, and with it the trimming an
XADD would have done; anything queued in a MULTI) but still runs those that free it
(XTRIM, XDEL, XACK) and reads. So a publisher whose XADD was refused trims what the
learners have consumed and tries again (:class:`rolloutfleet.transport.publisher.BatchPublisher`)::

    trimmed = trim_consumed(client, "rolloutfleet:{default/cartpole}:batches", ["learner"])  # doctest: +SKIP

Pure of policy: which groups are learners' is the caller's to say
(:mod:`rolloutfleet.spec.learners`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import redis


def consumed_bound(groups: Any, pending: Sequence[Any], learners: Sequence[str]) -> tuple[int, int] | None:
    """The first stream id some learner group has not consumed, from an XINFO GROUPS reply
    and each learner group's XPENDING summary (in the order of ``learners``): every entry
    before it was delivered to and acknowledged by every one of them. None when a learner
    group is missing from ``groups`` (gone meanwhile) or there is none.

    >>> consumed_bound([{"name": b"learner", "last-delivered-id": b"7-0"}], [{"pending": 0}], ["learner"])
    (7, 1)
    >>> consumed_bound([{"name": "a", "last-delivered-id": "9-0"}], [{"pending": 2, "min": "5-3"}], ["a"])
    (5, 3)
    """
    last_delivered = {_text(g["name"]): _text(g["last-delivered-id"]) for g in groups}
    bounds = []
    for name, summary in zip(learners, pending, strict=True):
        if name not in last_delivered:
            return None
        if int(summary["pending"]):
            bounds.append(stream_id(summary["min"]))  # kept: still in a learner's hands
        else:
            ms, seq = stream_id(last_delivered[name])
            bounds.append((ms, seq + 1))
    return min(bounds, default=None)


def trim_consumed(client: redis.Redis, key: str, learners: Sequence[str]) -> int:
    """XTRIM MINID the entries of stream ``key`` that every group of ``learners`` has
    consumed; how many went. Nothing while there is no learner group."""
    if not learners:
        return 0
    pipe = client.pipeline(transaction=False)
    pipe.xinfo_groups(key)
    for name in learners:
        pipe.xpending(key, name)
    groups, *pending = pipe.execute()
    bound = consumed_bound(groups, pending, learners)
    if bound is None:
        return 0  # a group went away meanwhile: judged again at the next refusal
    return int(client.xtrim(key, minid=f"{bound[0]}-{bound[1]}", approximate=False))


def drop_oldest(client: redis.Redis, key: str, fraction: int = 4) -> tuple[int, int]:
    """Trim the oldest ``1/fraction`` of stream ``key`` (at least one entry): (trimmed, of
    those the ones some group had not been given yet). No MULTI: Redis refuses every
    command queued in one while it is out of memory."""
    pipe = client.pipeline(transaction=False)
    pipe.xlen(key)
    pipe.xinfo_groups(key)
    before, groups = pipe.execute(raise_on_error=False)
    if isinstance(before, Exception) or not int(before):
        return 0, 0
    before = int(before)
    trimmed = int(client.xtrim(key, maxlen=before - max(1, before // fraction), approximate=False))
    return trimmed, max(0, trimmed - (before - undelivered(before, groups)))


def undelivered(length: int, groups: Any) -> int:
    """Entries of a stream of ``length`` the slowest group has not been given (all, without groups)."""
    if isinstance(groups, Exception) or not groups:
        return length
    return max(length if g.get("lag") is None else min(int(g["lag"]), length) for g in groups)


def full_message(client: redis.Redis, key: str, waited: float, timeout: float, reason: str) -> str:
    """One line on a Redis that stayed out of memory: where, how long, how full, why."""
    memory: dict[str, Any] = {}
    with contextlib.suppress(redis.RedisError):
        memory = client.info("memory")
    kwargs = client.connection_pool.connection_kwargs
    return (
        f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')} has refused writes to {key} for {waited:.1f} s "
        f"(blockTimeoutSeconds {timeout:g}): out of memory, {memory.get('used_memory_human', '?')} used of maxmemory "
        f"{memory.get('maxmemory_human', '?')} (policy {memory.get('maxmemory_policy', '?')}); {reason} "
        "Otherwise raise maxmemory."
    )


def stream_id(value: bytes | str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` as a pair of numbers (ordered as Redis orders ids)."""
    ms, _, seq = _text(value).partition("-")
    return int(ms), int(seq or 0)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

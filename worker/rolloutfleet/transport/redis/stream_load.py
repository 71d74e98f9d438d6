"""How loaded a batch stream is, as ``block`` backpressure judges it, from the replies of
Redis (pure: no client; :mod:`.backpressure` asks, this module judges): which consumer groups
are learners' (seen reading within ``learner_idle_s``), the entries the slowest of them has
not finished, and the first entry every learner group has consumed (what trimming may drop).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamLoad:
    """What ``block`` backpressure judges a stream by."""

    unconsumed: int
    """Entries the slowest learner group has not finished (the whole stream while no group is a learner's)."""
    group: str | None
    """That group; None when no group is a learner's."""
    ignored: tuple[str, ...] = ()
    """Groups left out: not seen reading within ``learner_idle_s``."""
    waiting: str | None = None
    """While no group is a learner's: a group never read, delivered up to the stream's last
    entry, nothing pending. A learner blocked in its first XREADGROUP looks so (Redis makes a
    consumer only once it delivers one an entry): the next publish goes in, to wake it."""


def stream_load(
    length: int, groups: Any, idle_ms: Mapping[str, int | None], learner_idle_s: float, last_id: str | None = None
) -> StreamLoad:
    """The load of a stream of ``length`` entries from its XINFO GROUPS reply and, per
    group, how long ago it was last seen reading (None: never). ``last_id``: the stream's
    last entry; a group delivered up to it has nothing undelivered, whatever its ``lag``
    says (Redis's entries-read counter can stay behind after restarts)."""
    if isinstance(groups, Exception) or not groups:
        return StreamLoad(length, None)
    worst, holder, ignored, waiting = 0, None, [], None
    for group in groups:
        name = decoded(group["name"])
        lag = group.get("lag")
        # lag is NULL when Redis cannot tell (entries deleted past the group's position):
        # count the whole stream, the safe side for both policies.
        undelivered = length if lag is None else min(int(lag), length)
        if last_id is not None and decoded(group.get("last-delivered-id", "")) == last_id:
            undelivered = 0
        load = min(undelivered + int(group.get("pending", 0)), length)
        idle = idle_ms.get(name)
        if idle is None or idle > learner_idle_s * 1000:
            ignored.append(name)
            if idle is None and load == 0:
                waiting = name
            continue
        if holder is None or load > worst:
            worst, holder = load, name
    if holder is None:
        return StreamLoad(length, None, tuple(ignored), waiting)
    return StreamLoad(worst, holder, tuple(ignored))


def group_idle_ms(names: Sequence[str], consumers: Sequence[Any], reading: Any, now: Any) -> dict[str, int | None]:
    """Per group: milliseconds since it was last seen reading, from its XINFO CONSUMERS
    reply (``consumers``, in the order of ``names``), the ``learners`` hash (``reading``)
    and Redis's TIME reply (``now``); None: never seen."""
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000 if isinstance(now, list | tuple) else None
    declared = (
        {} if isinstance(reading, Exception) or not reading else {decoded(k): decoded(v) for k, v in reading.items()}
    )
    idle: dict[str, int | None] = {}
    for name, reply in zip(names, consumers, strict=True):
        seen = [int(c["idle"]) for c in reply] if isinstance(reply, list) else []
        stamp = declared.get(name, "")
        if now_ms is not None and stamp.isdigit():
            seen.append(max(0, now_ms - int(stamp)))
        idle[name] = min(seen, default=None)
    return idle


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
    last_delivered = {decoded(g["name"]): decoded(g["last-delivered-id"]) for g in groups}
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


def stream_id(value: bytes | str) -> tuple[int, int]:
    """``"<ms>-<seq>"`` as a pair of numbers (ordered as Redis orders ids)."""
    ms, _, seq = decoded(value).partition("-")
    return int(ms), int(seq or 0)


def decoded(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

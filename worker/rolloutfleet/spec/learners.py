"""Which consumer groups are learners': the rule ``block`` backpressure and ``rolloutfleet
streams`` share.

A group is a learner's while it reads. Two signals, the most recent wins:

* a :class:`~rolloutfleet.transport.consumer.BatchConsumer` says so on every read: the job's
  ``learners`` hash maps its group to Redis's clock (TIME, so hosts' clocks never matter)
  at its last XREADGROUP, whether or not that returned entries;
* XINFO CONSUMERS ``idle``: time since entries were last delivered to a consumer of the
  group, for learners that read the stream with their own code.

The first is needed because Redis before 7.2 refreshes a consumer's ``idle`` only when it
is given entries: a learner that has caught up, waiting on an empty stream while another
group holds the fleet back, would look idle too, and the fleet would wait for ever.

A group neither signal has seen within ``learner_idle_s`` (an inspection's group, a
learner that is gone) does not hold the workers back; while no group is a learner's the
whole stream counts, so the fleet waits, ``maxLen`` entries ahead, for a learner to come
(back).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DEFAULT_LEARNER_IDLE_S = 120.0
"""Longer than a learner's usual pause between reads (its training step). Workers take
another from ``$ROLLOUTFLEET_LEARNER_IDLE_SECONDS``."""
LEARNERS_TTL_MS = 24 * 3600 * 1000
"""The ``learners`` hash goes away a day after the last read of any of the job's groups."""

READING_SCRIPT = """
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], now[1] .. string.format('%03d', math.floor(now[2] / 1000)))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""
"""KEYS[1]: the job's ``learners`` hash; ARGV: the group, the hash's TTL in ms."""


@dataclass(frozen=True)
class StreamLoad:
    """What ``block`` backpressure judges a stream by."""

    unconsumed: int
    """Entries the slowest learner group has not finished (the whole stream while no group is a learner's)."""
    group: str | None
    """That group; None when no group is a learner's."""
    ignored: tuple[str, ...] = ()
    """Groups left out: not seen reading within ``learner_idle_s``."""


def stream_load(
    length: int, groups: Any, idle_ms: Mapping[str, int | None], learner_idle_s: float, last_id: str | None = None
) -> StreamLoad:
    """The load of a stream of ``length`` entries from its XINFO GROUPS reply and, per
    group, how long ago it was last seen reading (None: never). ``last_id``: the stream's
    last entry; a group delivered up to it has nothing undelivered, whatever its ``lag``
    says (Redis's entries-read counter can stay behind after restarts)."""
    if isinstance(groups, Exception) or not groups:
        return StreamLoad(length, None)
    worst, holder, ignored = 0, None, []
    for group in groups:
        name = _text(group["name"])
        idle = idle_ms.get(name)
        if idle is None or idle > learner_idle_s * 1000:
            ignored.append(name)
            continue
        lag = group.get("lag")
        # lag is NULL when Redis cannot tell (entries deleted past the group's position):
        # count the whole stream, the safe side for both policies.
        undelivered = length if lag is None else min(int(lag), length)
        if last_id is not None and _text(group.get("last-delivered-id", "")) == last_id:
            undelivered = 0
        load = min(undelivered + int(group.get("pending", 0)), length)
        if holder is None or load > worst:
            worst, holder = load, name
    if holder is None:
        return StreamLoad(length, None, tuple(ignored))
    return StreamLoad(worst, holder, tuple(ignored))


def group_idle_ms(names: Sequence[str], consumers: Sequence[Any], reading: Any, now: Any) -> dict[str, int | None]:
    """Per group: milliseconds since it was last seen reading, from its XINFO CONSUMERS
    reply (``consumers``, in the order of ``names``), the ``learners`` hash (``reading``)
    and Redis's TIME reply (``now``); None: never seen."""
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000 if isinstance(now, list | tuple) else None
    declared = {} if isinstance(reading, Exception) or not reading else {_text(k): _text(v) for k, v in reading.items()}
    idle: dict[str, int | None] = {}
    for name, reply in zip(names, consumers, strict=True):
        seen = [int(c["idle"]) for c in reply] if isinstance(reply, list) else []
        stamp = declared.get(name, "")
        if now_ms is not None and stamp.isdigit():
            seen.append(max(0, now_ms - int(stamp)))
        idle[name] = min(seen, default=None)
    return idle


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

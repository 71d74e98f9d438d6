"""Making room in a Redis that is out of memory (``maxmemory`` reached, policy ``noeviction``).

Redis then refuses every command that may take memory (XADD, and with it the trimming an
XADD would have done; anything queued in a MULTI) but still runs those that free it
(XTRIM, XDEL, XACK) and reads. So a publisher whose XADD was refused trims what the
learner groups have consumed (:mod:`rolloutfleet.transport.redis.backpressure` says which groups
those are) and tries again, waiting for the learners while nothing consumed is left, for at
most ``block_timeout_s`` (:class:`MemoryRoom`); ``dropOldest`` drops the oldest entries too.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis

from rolloutfleet.transport.redis.backpressure import BackpressureMeter, BackpressureTimeout, PublishInterrupted
from rolloutfleet.transport.redis.retry import Backoff
from rolloutfleet.transport.redis.stream_load import StreamLoad, consumed_bound

log = logging.getLogger(__name__)


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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisFull(BackpressureTimeout):
    """Redis stayed out of memory (``maxmemory``, ``noeviction``) for ``block_timeout_s``
    though everything the learner groups had consumed was trimmed."""


class RoomStats(Protocol):
    """What making room counted (:class:`~rolloutfleet.transport.publisher.PublisherStats` holds these)."""

    oom_waits: int
    oom_wait_seconds: float
    trimmed: int
    dropped: int


class MemoryRoom:
    """A publisher's writes to one stream while Redis may be out of memory: trim what the
    learners consumed and try again; wait while nothing is left to trim (``dropOldest``:
    drop the oldest entries); raise :class:`RedisFull` after ``block_timeout_s``."""

    def __init__(
        self,
        meter: BackpressureMeter,
        *,
        drop_oldest: bool,
        interrupted: threading.Event,
        stats: RoomStats,
    ) -> None:
        self.meter, self.drop_oldest, self._interrupted, self._stats = meter, drop_oldest, interrupted, stats

    def add(self, add_once: Callable[[], str]) -> str:
        """``add_once()`` (an XADD); while Redis refuses it for memory, make room and wait."""
        started: float | None = None
        backoff = Backoff(0.01, 0.5)
        timeout = self.meter.block_timeout_s
        while True:
            try:
                entry_id = add_once()
            except redis.exceptions.OutOfMemoryError:
                if started is None:
                    started = time.monotonic()
                    self._stats.oom_waits += 1
                    log.warning(
                        "redis refuses writes to %s: out of memory (maxmemory); trimming what the learners "
                        "consumed and waiting for room",
                        self.meter.keys.batches,
                    )
                if self._make_room():
                    continue  # something was freed: try at once
                waited = time.monotonic() - started
                if self._interrupted.is_set():
                    self._stats.oom_wait_seconds += waited
                    raise PublishInterrupted(
                        f"gave up waiting for room in {self.meter.keys.batches} (Redis out of memory): interrupted"
                    ) from None
                if waited >= timeout:
                    self._stats.oom_wait_seconds += waited
                    raise RedisFull(self._message(waited), stream=self.meter.keys.batches, waited_s=waited) from None
                self._interrupted.wait(min(backoff.next(), timeout - waited))
                continue
            if started is not None:
                self._stats.oom_wait_seconds += time.monotonic() - started
            return entry_id

    def trim_consumed(self) -> int:
        """Remove the entries every learner group has consumed; how many. Groups that are not
        learners' (:mod:`rolloutfleet.transport.redis.backpressure`) are not waited for."""
        load = self.meter.load()
        learners = [name for name in self.meter.groups if name not in load.ignored]
        if load.group is None:
            return 0  # no learner reads: nothing is consumed
        trimmed = trim_consumed(self.meter.client, self.meter.keys.batches, learners)
        self._stats.trimmed += trimmed
        if trimmed:
            log.info("trimmed %d consumed entries of %s to free memory", trimmed, self.meter.keys.batches)
        return trimmed

    def _make_room(self) -> bool:
        """Redis refused an XADD for memory: free what may be freed; whether anything was."""
        if self.trim_consumed():
            return True
        if not self.drop_oldest:
            return False
        # dropOldest never waits for learners: the oldest entries go, unread ones counted.
        trimmed, unread = drop_oldest(self.meter.client, self.meter.keys.batches)
        self._stats.dropped += unread
        return trimmed > 0

    def _message(self, waited: float) -> str:
        try:
            load = self.meter.load()
        except redis.RedisError:
            load = StreamLoad(0, None)
        reason = (
            f"learner group {load.group!r} has {load.unconsumed} unconsumed entries and nothing it consumed is left to "
            "trim: is the learner keeping up?"
            if load.group is not None
            else f"no consumer group has read within {self.meter.learner_idle_s:g} s, so nothing is consumed to trim: "
            "is the learner running?"
        )
        meter = self.meter
        return full_message(meter.client, meter.keys.batches, waited, meter.block_timeout_s, reason)

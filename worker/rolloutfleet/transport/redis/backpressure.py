"""``block`` backpressure, the rule and its Redis side in one place: which consumer groups
are learners' (a group is one while it reads: a :class:`~rolloutfleet.transport.consumer.BatchConsumer`
stamps the job's ``learners`` hash with Redis's clock on every read, and XINFO CONSUMERS
``idle`` covers learners reading with their own code), how loaded a stream is (entries the
slowest learner group has not finished), the wait for room, and the record of who holds
the fleet back that ``rolloutfleet streams`` shows. A group seen reading by neither signal
within ``learner_idle_s`` holds no one back; while no group is a learner's, the whole
stream counts, but a group never read that waits at the stream's end gets one entry at a
time. The why, with the numbers: docs/transport.md.

**Waiting costs Redis O(1).** A ``BatchConsumer`` adds an entry to the stream's ``room``
signal (:attr:`~rolloutfleet.transport.redis.keys.JobKeys.room`, one entry kept) with every ack
and when it starts reading. A publisher waiting for room while no learner reads, or while
the learner holding it back is a ``BatchConsumer`` (its group is stamped in ``learners``),
blocks on that signal (XREAD, :data:`SIGNAL_BLOCK_S` at a time) and measures the stream
again when it fires, or every :data:`REMEASURE_S` without one: about two commands a second
instead of a measurement every few ms. While no learner group exists, each block also asks
for the stream's groups (in the same round trip), so a learner of its own code that makes
one is seen within :data:`SIGNAL_BLOCK_S`. A learner of its own code (seen only by XINFO
CONSUMERS) sends no signal: a wait for it polls, as before.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis

from rolloutfleet.transport.redis.keys import JobKeys
from rolloutfleet.transport.redis.retry import Backoff
from rolloutfleet.transport.redis.stream_load import StreamLoad, consumed_bound, decoded, group_idle_ms, stream_load

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

LAST_ID_SCRIPT = """
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] then return last[1][1] end
return false
"""
"""KEYS[1]: a stream; the id of its last entry (nil when empty). XREVRANGE itself would send
the whole entry, its payload with it, to every measuring publisher."""


def signal_room(pipe: Any, keys: JobKeys) -> None:
    """Queue the room signal on ``pipe`` (a pipeline or a client): an entry in the stream's
    ``room`` stream, the only one kept, which wakes every publisher waiting for room."""
    pipe.xadd(keys.room, {"room": 1}, maxlen=1, approximate=False)


class BackpressureTimeout(TimeoutError):
    """The stream stayed full (``block`` backpressure) for longer than ``block_timeout_s``.

    ``learner_absent``: no consumer group was a learner's (none read within
    ``learner_idle_s``), so the fleet waits for a learner to come rather than for one to
    catch up; ``group``: otherwise the learner group holding the fleet back (None for
    :class:`RedisFull`, and when no learner reads); ``stream``, ``waited_s``: where, how long.
    """

    def __init__(
        self,
        message: str,
        *,
        stream: str = "",
        group: str | None = None,
        learner_absent: bool = False,
        waited_s: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.stream, self.group, self.learner_absent, self.waited_s = stream, group, learner_absent, waited_s


HOLD_RECORD_AFTER_S = 1.0  # shorter waits are the learner setting the pace, not news
HOLD_RECORD_EVERY_S = 10.0
"""A waiting publisher refreshes the record of who holds it back this often (the first
after :data:`HOLD_RECORD_AFTER_S`); it lives :data:`HOLD_RECORD_TTL_MS`."""
SIGNAL_BLOCK_S = 2.0
"""The longest a wait blocks on the room signal at a time: how late an interrupted wait
(a worker told to stop) notices, and how often it tells ``on_wait``."""
REMEASURE_S = 10.0
"""With no room signal, a waiting publisher measures the stream again this often (a
learner group that went idle stops holding it; a signal lost with a failover)."""
MEASURE_SPACING_S = 0.05
"""The shortest time between two measurements of one wait (signals while a learner acks
many times a second): never more than the polling of a learner without signals."""
CONTENDED_MAX_S = 2.0
"""The longest a woken publisher waits, at random, before it measures: a signal wakes every
waiting publisher, and each one that then found the room taken by others doubles its wait
(from :data:`MEASURE_SPACING_S`, up to this); one that found room halves it. So a thousand
publishers contending for the room a learner frees measure a few times a second in all,
not a thousand times an ack."""
LAST_ID_EVERY_S = 1.0
"""While publishes wait for room, the stream's last id (a script, ~250 us of Redis's one
thread for a 185 KB entry) is looked up at most this often by a publisher, over all its
waits (a learner that frees a few entries at a time makes many short ones); the polls
between count a group's ``lag`` as Redis reports it."""
HOLD_RECORD_TTL_MS = 25_000
# "since" is Redis's clock (no host's): when the holder began to hold. A fresh record dates
# from the start of the wait that writes it; a change of holder, from now; refreshes by
# other waiting workers keep it.
HOLD_SCRIPT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local holder = redis.call('HGET', KEYS[1], 'group')
if not holder then
    redis.call('HSET', KEYS[1], 'since', string.format('%.0f', now_ms - tonumber(ARGV[2])))
elseif holder ~= ARGV[1] then
    redis.call('HSET', KEYS[1], 'since', string.format('%.0f', now_ms))
end
redis.call('HSET', KEYS[1], 'group', ARGV[1], 'unconsumed', ARGV[3], 'max_len', ARGV[4], 'ignored', ARGV[5],
           'learner_idle_s', ARGV[6])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return 1
"""


class PublishInterrupted(RuntimeError):
    """:meth:`BatchPublisher.interrupt` was called while ``publish`` waited for room."""


class WaitStats(Protocol):
    """What waiting for room cost (:class:`~rolloutfleet.transport.publisher.PublisherStats` holds these)."""

    blocked: int
    """Publishes that had to wait for room."""
    blocked_seconds: float
    block_timeouts: int


class BackpressureMeter:
    """One stream's ``block`` backpressure: measures the load (riding in an XADD's round
    trip, or alone), decides whether the *next* publish waits, and waits.

    ``client`` is the stream's node (a publisher re-routes it after a failover);
    ``producers``: publishers sharing the stream, to space the measurements.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: JobKeys,
        *,
        max_len: int,
        block_timeout_s: float,
        learner_idle_s: float,
        producers: int,
        interrupted: threading.Event,
        stats: WaitStats,
        hold_script: Callable[..., Any],
    ) -> None:
        self.client, self.keys, self.max_len = client, keys, max_len
        self.block_timeout_s, self.learner_idle_s, self.producers = block_timeout_s, learner_idle_s, producers
        self._interrupted, self._stats, self._hold_script = interrupted, stats, hold_script
        self.groups: list[str] = []
        """The stream's groups at the last measurement."""
        self.trim_before: str | None = None
        """Entries before this id are consumed by every learner group (last measurement)."""
        self.full = True
        """Whether the next publish waits first (unknown until the first measurement: yes)."""
        self._until_check = 0
        self._next_last_id = 0.0  # when a wait's look may find the stream's last id again
        self.contended_s = 0.0
        """How long, at most, this publisher waits at random after a signal before it measures
        (:data:`CONTENDED_MAX_S`)."""
        self.signalled = False
        """Whether the last measurement's holder sends room signals (a ``BatchConsumer``'s
        group, or no learner group at all: the first ``BatchConsumer`` signals): a wait blocks
        on the signal instead of polling."""
        self.on_wait: Callable[[str, StreamLoad, float], None] | None = None
        """Called after a second of waiting, then every :data:`SIGNAL_BLOCK_S`, with the
        stream, its load and the seconds waited."""

    def measures_next(self) -> bool:
        """Whether the next XADD carries a measurement. Far from full, a bare XADD: measuring
        costs a third of a publish and matters only near the limit."""
        if self._until_check > 0:
            self._until_check -= 1
            return False
        return True

    def queue_measure(self, pipe: Any, script: bool = True) -> None:
        """Queue the measurement on ``pipe``: consumers and pending summaries of the groups
        seen last time ride in the same round trip; a new group costs one more. ``script``:
        find the stream's last id with :data:`LAST_ID_SCRIPT` (in Redis, ~250 us for a 185 KB
        entry: Lua copies the entry); without, give it to :meth:`measured` (an XADD's id)
        or go without it."""
        pipe.xlen(self.keys.batches)
        pipe.xinfo_groups(self.keys.batches)
        pipe.hgetall(self.keys.learners)
        pipe.time()
        for name in self.groups:
            pipe.xinfo_consumers(self.keys.batches, name)
            pipe.xpending(self.keys.batches, name)
        if script:  # last: a group past the last entry has nothing undelivered
            pipe.eval(LAST_ID_SCRIPT, 1, self.keys.batches)

    def measured(self, replies: list[Any], added: bytes | str | None = None) -> StreamLoad:
        """The load from :meth:`queue_measure`'s replies (``added``: with ``script=False``,
        the id of the XADD they followed, the stream's last); decides the next publishes: wait
        when full, and skip measurements while even every producer publishing that many times
        could not fill more than half of the stream (at most 16, to notice a stalled learner)."""
        load = self._load(replies, added)
        self.full = self._no_room(load)
        self._until_check = min(16, (self.max_len // 2 - load.unconsumed) // self.producers)
        return load

    def load(self, last_id: bool = True) -> StreamLoad:
        """The stream's load now, in one round trip (two when the groups changed).
        ``last_id=False``: without the script; a group's stale ``lag`` then counts as is."""
        return self._load_and_signal(last_id)[0]

    def _load_and_signal(self, last_id: bool = True) -> tuple[StreamLoad, str]:
        """:meth:`load`, and in the same round trip the id of the room signal's last entry
        (``0-0`` while there is none): a signal after it fires an XREAD from it."""
        pipe = self.client.pipeline(transaction=False)
        pipe.xrevrange(self.keys.room, "+", "-", count=1)
        self.queue_measure(pipe, script=last_id)
        signal, *replies = pipe.execute(raise_on_error=False)
        if isinstance(signal, Exception):
            raise signal
        load = self._load(replies[:-1], replies[-1]) if last_id else self._load(replies, None)
        return load, decoded(signal[0][0]) if signal else "0-0"

    def _load(self, replies: list[Any], last: Any) -> StreamLoad:
        """The load from the measurement's replies (without the script's) and the stream's
        last id (the script's reply, an XADD's id, or None: unknown)."""
        length, groups, reading, now, *per_group = replies
        if isinstance(length, Exception):
            raise length
        stamped = set() if isinstance(reading, Exception) or not reading else {decoded(k) for k in reading}
        names = [] if isinstance(groups, Exception) else [decoded(g["name"]) for g in groups]
        if names != self.groups:
            self.groups = names
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.xinfo_consumers(self.keys.batches, name)
                pipe.xpending(self.keys.batches, name)
            per_group = pipe.execute(raise_on_error=False) if names else []
        consumers, pending = per_group[0::2], per_group[1::2]
        idle = group_idle_ms(names, consumers, reading, now)
        last_id = decoded(last) if isinstance(last, bytes | str) else None
        load = stream_load(int(length), groups, idle, self.learner_idle_s, last_id)
        self.signalled = load.group is None or load.group in stamped
        learners = [(name, summary) for name, summary in zip(names, pending, strict=True) if name not in load.ignored]
        bound = None
        if load.group is not None and not any(isinstance(summary, Exception) for _, summary in learners):
            bound = consumed_bound(groups, [summary for _, summary in learners], [name for name, _ in learners])
        # Unknown (no learner group, a group gone meanwhile): no trimming until it is known.
        self.trim_before = None if bound is None else f"{bound[0]}-{bound[1]}"
        return load

    def wait_for_room(self) -> None:
        """Wait until the slowest learner group leaves room: blocking on the room signal when
        the holder sends one, else polling every few ms; raises :class:`BackpressureTimeout`
        after ``block_timeout_s``, :class:`PublishInterrupted` once interrupted."""
        started = time.monotonic()
        backoff, waited = Backoff(0.001, 0.05), False
        next_record = next_say = started + HOLD_RECORD_AFTER_S
        measured_at = started

        def look() -> tuple[StreamLoad, str]:
            nonlocal measured_at
            measured_at = time.monotonic()
            if measured_at < self._next_last_id:
                return self._load_and_signal(last_id=False)
            self._next_last_id = measured_at + LAST_ID_EVERY_S
            return self._load_and_signal()

        load, signal = look()
        while self._no_room(load):
            if self._interrupted.is_set():
                raise PublishInterrupted(f"gave up waiting for room in {self.keys.batches}: interrupted")
            now = time.monotonic()
            waited_s = now - started
            if waited_s >= self.block_timeout_s:
                self._stats.blocked_seconds += waited_s
                self._stats.block_timeouts += 1
                raise self._timeout(load, waited_s)
            if now >= next_record:
                next_record = now + HOLD_RECORD_EVERY_S
                self._record_hold(load, waited_s)
            if now >= next_say:
                next_say = now + SIGNAL_BLOCK_S
                if self.on_wait is not None:
                    self.on_wait(self.keys.batches, load, waited_s)
            waited = True
            left = max(0.0, self.block_timeout_s - waited_s)
            woken = False
            if not self.signalled:
                self._interrupted.wait(min(backoff.next(), left))
            elif woken := self._signal_after(signal, min(SIGNAL_BLOCK_S, max(0.001, next_say - now), left)):
                spacing = measured_at + MEASURE_SPACING_S - time.monotonic()
                self._interrupted.wait(max(spacing, random.uniform(0.0, self.contended_s)))
            elif now - measured_at < REMEASURE_S:
                continue  # no signal: nothing changed that a measurement would see
            load, signal = look()
            if woken and self._no_room(load):  # others took the room this signal freed
                self.contended_s = min(CONTENDED_MAX_S, max(2 * self.contended_s, MEASURE_SPACING_S))
        self.contended_s /= 2
        if waited:
            self._stats.blocked += 1
            self._stats.blocked_seconds += time.monotonic() - started
        self.full = False

    def _signal_after(self, signal: str, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for a room signal after id ``signal``; whether one came
        (or, while no group exists, whether one was made: a learner of its own code)."""
        if timeout_s <= 0:
            return False
        pipe = self.client.pipeline(transaction=False)
        watch_groups = not self.groups
        if watch_groups:
            pipe.xinfo_groups(self.keys.batches)
        pipe.xread({self.keys.room: signal}, count=1, block=max(1, int(timeout_s * 1000)))
        *groups, reply = pipe.execute(raise_on_error=False)
        if isinstance(reply, Exception):
            raise reply
        return bool(reply) or (watch_groups and not isinstance(groups[0], Exception) and bool(groups[0]))

    def _no_room(self, load: StreamLoad) -> bool:
        """Whether the next publish waits. A group waiting at the stream's end gets the entry
        (the stream is then past ``max_len``, so the publish after it measures again)."""
        return load.unconsumed >= self.max_len and load.waiting is None

    def _timeout(self, load: StreamLoad, waited_s: float) -> BackpressureTimeout:
        reason = (
            f"learner group {load.group!r} is not keeping up"
            if load.group is not None
            else f"no consumer group has read within {self.learner_idle_s:g} s: is the learner running?"
        )
        return BackpressureTimeout(
            f"stream {self.keys.batches} has held {load.unconsumed} unconsumed entries (maxLen {self.max_len}) "
            f"for {waited_s:.1f} s (blockTimeoutSeconds {self.block_timeout_s:g}): {reason}",
            stream=self.keys.batches,
            group=load.group,
            learner_absent=load.group is None,
            waited_s=waited_s,
        )

    def _record_hold(self, load: StreamLoad, waited_s: float) -> None:
        """Say who holds the fleet back, for ``rolloutfleet streams``; the record expires once
        no waiting worker refreshes it. Skipped while Redis refuses writes (out of memory)."""
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            self._hold_script(
                keys=[self.keys.backpressure],
                args=[
                    load.group or "",
                    int(waited_s * 1000),
                    load.unconsumed,
                    self.max_len,
                    ",".join(load.ignored),
                    f"{self.learner_idle_s:g}",
                    HOLD_RECORD_TTL_MS,
                ],
            )

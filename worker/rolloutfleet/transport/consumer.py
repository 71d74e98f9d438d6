"""Learner side: read a job's batches with consumer-group semantics (at-least-once).

Message by message::

    consumer = BatchConsumer("redis://127.0.0.1:6379/0", "cartpole")      # doctest: +SKIP
    for message in consumer:                                               # doctest: +SKIP
        train(message.batch, version=message.metadata.weights_seq_no)
        message.ack()

Or as one training batch of at least ``min_steps`` rows::

    batch = consumer.get(min_steps=4096, timeout=10.0)                     # doctest: +SKIP
    tensors = consumer.get(min_steps=4096, as_torch=True, device="cuda")   # doctest: +SKIP

**Ack after use.** A message is acked by ``message.ack()``; ``get()`` acks the messages
behind the batch it returned when it is called the next time (or on :meth:`commit`), so a
learner that dies while training on a batch leaves it pending, and another consumer of the
group reclaims it. ``get()`` returns ``None`` on timeout; rows read so far are kept for
the next call, not lost.

**Reclaiming.** Every ``reclaim_idle_s / 2`` the consumer runs XAUTOCLAIM: entries
delivered to any consumer of the group (a crashed learner) and not acked for
``reclaim_idle_s`` are delivered to this one. So ``reclaim_idle_s`` must exceed the
longest time a learner holds a message before acking it.

**Poison entries.** An entry whose payload or metadata cannot be decoded stays pending
(another consumer, e.g. one with the compression library installed, may succeed); once it
has been delivered ``max_deliveries`` times it is moved, with the reason, to the job's
dead-letter stream and acked. An entry that decodes but cannot become part of the batch
``get()`` makes (other columns, dtypes or per-row shapes than the workers declared,
:mod:`rolloutfleet.transport.declared_columns`; with nothing declared, than most of the
entries read lately) is moved to the dead letters at once, with the reason, and the good entries read with it are delivered. Whatever
``get()`` raises, the entries it had read stay with the consumer, unacknowledged, for the
next call. While Redis is out of memory a dead letter cannot be written: the entry is
left pending and moved when it comes round again.

**Shards.** A job whose workers write several batch streams (``spec.redis.shards``, a
Redis Cluster) is read on all of them: the consumer follows the number the workers
recorded (:mod:`rolloutfleet.transport.sharding`; ``shards=`` fixes it), looks again every
few seconds, and keeps its group, reclaiming and dead letters per stream;
:attr:`Message.shard` says which. ``get(min_steps)`` gathers rows across streams.

**Redis away.** Every call rides out a Redis that restarts, pauses or refuses writes for up
to ``reconnect_timeout_s`` (default 120 s) after it began, then raises
:class:`~rolloutfleet.transport.connection.RedisUnavailable`, one line saying where and
why. A restart without persistence loses the group: it is created again.

**Duplicates and staleness.** A batch re-sent by a publisher after a lost reply carries
the same (producer, seq) and is dropped (acked, counted). With ``max_policy_lag=k``,
rows sampled with weights older than ``policy_version - k`` are dropped, judged row by
row from the batch's ``weights_seq_no`` column (a fragment can hold rows carried over
from before a weights update, older than the rest): the other rows of the batch are
delivered, and a batch with no row left is dropped whole (acked). Both are counted
(:attr:`ConsumerStats.stale_rows`, :attr:`ConsumerStats.stale`). ``policy_version`` is
the job's published weights version unless the learner sets it; should that go back
(Redis lost its state), it is logged and counted (:attr:`ConsumerStats.weights_resets`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis

from rolloutfleet.data.batch import WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.data.codec import DecodeError
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.redis_keys import DEFAULT_GROUP, JobKeys, job_keys
from rolloutfleet.transport.appetite import AppetiteWriter
from rolloutfleet.transport.backpressure import LEARNERS_TTL_MS, READING_SCRIPT
from rolloutfleet.transport.connection import DEFAULT_RECONNECT_TIMEOUT_S, RetryLoop, connect, where_url
from rolloutfleet.transport.declared_columns import SchemaReference, read_declared
from rolloutfleet.transport.entries import (
    Message,
    check_versions,
    concat_messages,
    decode_entry,
    fresh_rows,
    schema_of,
)
from rolloutfleet.transport.learner_args import count_arg, seconds_arg
from rolloutfleet.transport.sharding import read_shards
from rolloutfleet.transport.stream_status import as_text, read_stream_status, weights_version

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
T = TypeVar("T")

DEAD_LETTER_MAX_LEN = 10_000
_SEEN_CAPACITY = 1 << 16
SOCKET_MARGIN_S = 10.0
"""A read's socket timeout is its BLOCK plus this."""
SHARDS_REFRESH_S = 5.0
"""How often a consumer looks whether the job's workers write more (or fewer) batch streams."""
SHARD_BLOCK_MS = 50
"""With several streams, how long a read waits on one of them once none had anything."""


@dataclass
class _Shard:
    """One batch stream of the job and this consumer's reclaim position in it."""

    keys: JobKeys
    reclaim_cursor: str = "0-0"
    next_reclaim: float = 0.0


class _Full(Exception):
    """Redis is out of memory: an OutOfMemoryError kept from the retry loop."""


def _refusing_oom(operation: Callable[[], T]) -> T:
    try:
        return operation()
    except (redis.exceptions.OutOfMemoryError, redis.exceptions.ExecAbortError) as exc:
        if isinstance(exc, redis.exceptions.ExecAbortError) and "OOM" not in str(exc) and "memory" not in str(exc):
            raise
        raise _Full(str(exc)) from exc


@dataclass
class ConsumerStats:
    """Counters since the consumer was made."""

    delivered: int = 0
    reclaimed: int = 0
    """Entries taken over from idle consumers (XAUTOCLAIM)."""
    acked: int = 0
    duplicates: int = 0
    stale: int = 0
    """Batches dropped whole by ``max_policy_lag`` (no row recent enough)."""
    stale_rows: int = 0
    """Rows dropped by ``max_policy_lag``: those of the batches in ``stale``, and those cut
    from batches whose other rows were delivered."""
    decode_failures: int = 0
    dead_lettered: int = 0
    """Entries moved to the dead letters: undecodable ones, and ones no batch could be made with."""
    unfit: int = 0
    """Entries that decoded but could not join the batch ``get()`` made (other columns, dtypes, shapes)."""
    retries: int = 0
    weights_resets: int = 0
    """Times the job's published weights version was seen to go back (Redis lost its state)."""


@dataclass(frozen=True)
class ConsumerLag:
    """How far this consumer's group is behind."""

    pending: int
    undelivered: int | None
    oldest_pending_age_s: float | None
    policy_lag: int | None
    """Published weights version minus the oldest version among the last rows delivered."""


class BatchConsumer:
    """Reads batches of job ``namespace/job`` (or of a :class:`RolloutJob`) as consumer
    ``consumer`` of group ``group``; see the module doc for the delivery semantics.

    >>> consumer = BatchConsumer(url, "cartpole", reclaim_idle_s=60, max_policy_lag=4)  # doctest: +SKIP
    >>> batch = consumer.get(min_steps=2048, timeout=5.0)                               # doctest: +SKIP
    >>> consumer.lag()                                                                   # doctest: +SKIP
    ConsumerLag(pending=3, undelivered=0, oldest_pending_age_s=0.02, policy_lag=1)

    ``start``: where a newly created group begins, ``"0"`` (everything still in the
    stream) or ``"$"`` (only new entries).

    ``policy``: read one policy's stream of a multi-agent job (one consumer per policy; a
    learner of several policies makes several). Its batches get an ``agent_id`` column
    (text, from the entry's ``agent_ids``) beside ``agent_index``, and ``max_policy_lag``
    compares with that policy's weights version.

    >>> red = BatchConsumer(url, "tag", policy="red")                 # doctest: +SKIP
    """

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        reclaim_idle_s: float = 30.0,
        *,
        password: str | None = None,
        max_deliveries: int = 3,
        max_policy_lag: int | None = None,
        read_count: int = 16,
        block_s: float = 1.0,
        start: str = "0",
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
        policy: str | None = None,
        socket_timeout_s: float | None = None,
        shards: int | None = None,
    ) -> None:
        fixed_shards = shards
        if isinstance(job, RolloutJob):
            fixed_shards = shards or job.spec.redis.shards
            namespace, job = job.namespace, job.name
        self._job_keys = job_keys(namespace, job, policy)
        self._fixed_shards = fixed_shards
        self.shards: list[_Shard] = []
        """The job's batch streams, each with this consumer's reclaim state."""
        self.policy = policy
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        seconds_arg("reclaim_idle_s", reclaim_idle_s, zero=False)
        count_arg("max_deliveries", max_deliveries, 1)
        count_arg("read_count", read_count, 1)
        seconds_arg("block_s", block_s, zero=False, finite=True)
        seconds_arg("reconnect_timeout_s", reconnect_timeout_s)
        if max_policy_lag is not None:
            count_arg("max_policy_lag", max_policy_lag, 0)
        self.reclaim_idle_s = reclaim_idle_s
        self.max_deliveries = max_deliveries
        self.max_policy_lag = max_policy_lag
        self.policy_version: int | None = None
        """The learner's current weights version; None: read the job's published version."""
        self.read_count = read_count
        self.block_s = block_s
        self.start = start
        self.stats = ConsumerStats()
        # Silence longer than the BLOCK plus this margin is a Redis that is away (a retry
        # follows), well within the reconnect deadline.
        timeout = block_s + SOCKET_MARGIN_S if socket_timeout_s is None else socket_timeout_s
        self._retry = RetryLoop(reconnect_timeout_s, where=where_url(redis_url))
        self.client = self._retry.call(lambda: connect(redis_url, password, socket_timeout=timeout))
        self._retry.client = self.client
        self._reading = self.client.register_script(READING_SCRIPT)
        self.appetite = AppetiteWriter(self.client, self._job_keys, group, self.consumer)
        """Starved time and rows, written with the read stamps: the autoscaler's signal (:mod:`rolloutfleet.spec.appetite`)."""
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._in_flight: set[tuple[int, str]] = set()
        self._carry: list[Message] = []
        self._uncommitted: list[Message] = []
        self._next_reading = 0.0
        self._next_shards = time.monotonic() + SHARDS_REFRESH_S
        self._turn = 0
        self._last_min_seq_no: int | None = None
        self._schemas = SchemaReference(lambda: self._call(lambda: read_declared(self.client, self._job_keys)))
        """What get() judges batches against: the workers' declared columns, else the recent majority."""
        self._published_version: int | None = None
        self._call(self._follow_shards)

    # -- Redis calls ---------------------------------------------------------------------

    @property
    def keys(self) -> JobKeys:
        """The keys of the job (its first batch stream; :attr:`shards` has every one)."""
        return self.shards[0].keys if self.shards else self._job_keys

    def _follow_shards(self) -> None:
        """Read every batch stream the job's workers write (``spec.redis.shards``): the
        number they recorded, else the Redis's default; groups made on new ones."""
        count = self._fixed_shards or read_shards(self.client, self._job_keys)
        if count == len(self.shards):
            return
        known = {shard.keys.batches: shard for shard in self.shards}
        shards = [known.get(keys.batches) or _Shard(keys) for keys in self._job_keys.all_shards(count)]
        for shard in shards:
            if shard.keys.batches not in known:
                self._create_group(shard.keys)
        if self.shards:
            log.info("%s: reading %d batch stream(s), was %d", self._job_keys.tag, count, len(self.shards))
        self.shards = shards

    def _create_group(self, keys: JobKeys) -> None:
        try:
            self.client.xgroup_create(keys.batches, self.group, id=self.start, mkstream=True)
        except redis.exceptions.OutOfMemoryError:
            # Refused before Redis looked: a group that exists is all we need.
            if self.group not in self._groups(keys):
                raise
        except redis.ResponseError as exc:
            if "BUSYGROUP" in str(exc):
                return
            if "WRONGTYPE" in str(exc):
                raise redis.ResponseError(
                    f"{keys.batches} holds a {as_text(self.client.type(keys.batches))}, not a stream: "
                    "something else wrote that key"
                ) from None
            raise

    def _groups(self, keys: JobKeys) -> list[str]:
        try:
            return [as_text(g["name"]) for g in self.client.xinfo_groups(keys.batches)]
        except redis.ResponseError:  # no stream
            return []

    def _call(self, operation: Callable[[], T]) -> T:
        """``operation`` with reconnect/backoff, re-creating the group if Redis lost it."""

        def attempt() -> T:
            try:
                return operation()
            except redis.ResponseError as exc:
                # A restarted Redis without persistence has no stream and no group.
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("group %s of %s is gone (Redis restarted?); re-creating it", self.group, self.keys.batches)
                for shard in self.shards:
                    self._create_group(shard.keys)
                return operation()

        def count_retry(exc: Exception) -> None:
            self.stats.retries += 1
            log.warning("redis unavailable for %s (%s); retrying", self.keys.batches, exc)

        return self._retry.call(attempt, on_retry=count_retry)

    def _read_entries(self, count: int, block_ms: int) -> list[tuple[int, bytes, Any]]:
        """``(shard, id, fields)`` of entries: idle ones reclaimed first, else new ones."""
        now = time.monotonic()
        if now >= self._next_shards:
            self._next_shards = now + SHARDS_REFRESH_S
            self._call(self._follow_shards)
        for index, shard in enumerate(self.shards):
            if now >= shard.next_reclaim:
                shard.next_reclaim = now + self.reclaim_idle_s / 2
                entries = self._reclaim(index, count)
                if entries:
                    return [(index, entry_id, fields) for entry_id, fields in entries]
        if now >= self._next_reading:
            # Said on reads with entries or without: the fleet's backpressure waits only
            # for groups seen reading (rolloutfleet.transport.backpressure), and a learner that has
            # caught up must not look gone. Twice a second is precise enough.
            self._next_reading = now + 0.5
            self._stamp()
        if len(self.shards) == 1:
            return self._read_shards([0], count, max(block_ms, 1))
        # Several streams: one look at each without blocking, then a short block on one in
        # turn (a BLOCK on one stream cannot see the others).
        found = self._read_shards(list(range(len(self.shards))), count, None)
        if not found:
            self._turn = (self._turn + 1) % len(self.shards)
            found = self._read_shards([self._turn], count, max(1, min(block_ms, SHARD_BLOCK_MS)))
        return found

    def _stamp(self) -> None:
        """Mark this group as reading on every shard (:mod:`rolloutfleet.transport.backpressure`)."""

        def stamp(shard: _Shard) -> None:
            self._reading(keys=[shard.keys.learners], args=[self.group, LEARNERS_TTL_MS])

        for shard in self.shards:
            try:
                self._call(lambda shard=shard: _refusing_oom(lambda: stamp(shard)))  # type: ignore[misc]
            except _Full:
                # Out of memory refuses the stamp, not the read: a learner draining a full
                # Redis is what frees it (the workers trim what it consumed).
                self._next_reading = 0.0
        with contextlib.suppress(_Full):
            self._call(lambda: _refusing_oom(self.appetite.write))

    def _read_shards(self, indices: list[int], count: int, block_ms: int | None) -> list[tuple[int, bytes, Any]]:
        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for index in indices:
                streams: dict[Any, Any] = {self.shards[index].keys.batches: ">"}
                pipe.xreadgroup(self.group, self.consumer, streams, count=count, block=block_ms)
            replies = pipe.execute(raise_on_error=False)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

        replies = self._call(read)
        return [
            (index, entry_id, fields)
            for index, reply in zip(indices, replies, strict=True)
            for _, entries in reply or []  # RESP2: [[stream, entries]]
            for entry_id, fields in entries
        ]

    def _reclaim(self, index: int, count: int) -> list[tuple[bytes, Any]]:
        shard = self.shards[index]
        reply = self._call(
            lambda: self.client.xautoclaim(
                shard.keys.batches,
                self.group,
                self.consumer,
                min_idle_time=int(self.reclaim_idle_s * 1000),
                start_id=shard.reclaim_cursor,
                count=count,
            )
        )
        cursor, entries = reply[0], reply[1]
        shard.reclaim_cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if shard.reclaim_cursor != "0-0":
            shard.next_reclaim = 0.0  # more idle entries wait: keep claiming on the next read
        # Our own messages still in the learner's hands are not redeliveries.
        fresh = [(i, f) for i, f in entries if (index, as_text(i)) not in self._in_flight]
        if fresh:
            self.stats.reclaimed += len(fresh)
            log.info("reclaimed %d idle entries of %s", len(fresh), shard.keys.batches)
        return fresh

    def _current_policy_version(self) -> int | None:
        if self.policy_version is not None:
            return self.policy_version
        version = weights_version(self._call(lambda: self.client.get(self.keys.weights_version)))
        if version is not None:
            if self._published_version is not None and version < self._published_version:
                self.stats.weights_resets += 1
                log.warning(
                    "the published weights version of %s went back from %d to %d (Redis lost its state?): "
                    "policy lag is judged by %d from now on",
                    self.keys.weights_version, self._published_version, version, version,
                )  # fmt: skip
            self._published_version = version
        return version

    # -- turning entries into messages ------------------------------------------------

    def _fetch(self, count: int, block_ms: int) -> list[Message]:
        entries = self._read_entries(count, block_ms)
        if not entries:
            return []
        newest = self._current_policy_version() if self.max_policy_lag is not None else None
        messages: list[Message] = []
        versions: list[int] = []  # the oldest weights version of each message's rows
        drop: list[tuple[int, str]] = []
        for shard, raw_id, fields in entries:
            entry_id = as_text(raw_id)
            if fields is None:  # deleted (trimmed) while pending
                drop.append((shard, entry_id))
                continue
            try:
                batch, metadata = decode_entry(fields, self.policy)
                if newest is not None:
                    # Here, not where rows are judged: an entry that fails must not be
                    # remembered as seen, or its next delivery would pass for a duplicate.
                    check_versions(batch)
            except DecodeError as exc:
                self._poisoned(shard, entry_id, fields, str(exc))
                continue
            key = (metadata.producer, metadata.seq)
            if metadata.producer and key in self._seen:
                self.stats.duplicates += 1
                drop.append((shard, entry_id))
                continue
            if metadata.producer:
                self._seen[key] = None
                if len(self._seen) > _SEEN_CAPACITY:
                    self._seen.popitem(last=False)
            oldest = metadata.weights_seq_no_min
            if newest is not None and self.max_policy_lag is not None:
                batch, stale_rows = fresh_rows(batch, metadata, newest - self.max_policy_lag)
                self.stats.stale_rows += stale_rows
                if not len(batch) and stale_rows:
                    self.stats.stale += 1
                    drop.append((shard, entry_id))
                    continue
                if stale_rows:
                    oldest = int(batch[WEIGHTS_SEQ_NO].min())
            self._in_flight.add((shard, entry_id))
            messages.append(Message(entry_id, batch, metadata, self, shard))
            versions.append(cast(int, oldest))
        for shard in sorted({shard for shard, _ in drop}):
            self._ack_ids(shard, [entry_id for s, entry_id in drop if s == shard])
        self.stats.delivered += len(messages)
        if versions:
            self._last_min_seq_no = min(versions)
        return messages

    def _poisoned(self, shard: int, entry_id: str, fields: Mapping[bytes, bytes], reason: str) -> None:
        self.stats.decode_failures += 1
        keys = self.shards[shard].keys
        detail = self._call(lambda: self.client.xpending_range(keys.batches, self.group, entry_id, entry_id, 1))
        deliveries = int(detail[0]["times_delivered"]) if detail else self.max_deliveries
        if deliveries < self.max_deliveries:
            log.warning("entry %s of %s: %s (delivery %d of %d; left pending for another try)",
                        entry_id, keys.batches, reason, deliveries, self.max_deliveries)  # fmt: skip
            return
        self._dead_letter(shard, entry_id, fields, reason, deliveries)

    def _dead_letter(
        self, shard: int, entry_id: str, fields: Mapping[bytes, bytes], reason: str, deliveries: int
    ) -> bool:
        """Move an entry with ``reason`` to its shard's dead letters (and ack it); whether it was
        moved (not while Redis is out of memory: it is left pending, to be reclaimed and judged again)."""
        keys = self.shards[shard].keys
        letter: dict[bytes | str, bytes | str | int] = {
            **{k: v for k, v in fields.items() if isinstance(k, bytes)},
            "dead_letter_reason": reason,
            "dead_letter_id": entry_id,
            "dead_letter_stream": keys.batches,
            "dead_letter_consumer": self.consumer,
            "dead_letter_deliveries": deliveries,
        }

        def move() -> None:
            pipe = self.client.pipeline(transaction=True)  # one slot: the stream's tag
            pipe.xadd(keys.dead_letters, letter, maxlen=DEAD_LETTER_MAX_LEN, approximate=True)  # type: ignore[arg-type]
            pipe.xack(keys.batches, self.group, entry_id)
            pipe.execute()

        try:
            # Not retried through a full Redis: the entry waits in the group instead.
            self._call(lambda: _refusing_oom(move))
        except _Full:
            log.warning("entry %s of %s: %s; left pending: Redis is out of memory, no dead letter can be written",
                        entry_id, keys.batches, reason)  # fmt: skip
            self._in_flight.discard((shard, entry_id))
            return False
        log.error("entry %s of %s: %s; moved to %s", entry_id, keys.batches, reason, keys.dead_letters)
        self._in_flight.discard((shard, entry_id))
        self.stats.dead_lettered += 1
        return True

    def _set_aside(self, messages: list[Message]) -> list[Message]:
        """The messages that fit the batch ``get()`` makes; the others go to the dead letters."""
        if not messages:
            return messages
        fit = []
        for message, reason in zip(messages, self._schemas.judge([schema_of(m.batch) for m in messages]), strict=True):
            if reason is None:
                fit.append(message)
                continue
            self.stats.unfit += 1
            self.stats.delivered -= 1
            # Judged again if it comes back (left pending while Redis is full): not a duplicate then.
            self._seen.pop((message.metadata.producer, message.metadata.seq), None)
            stream = self.shards[message.shard].keys.batches
            reply = self._call(lambda m=message, s=stream: self.client.xrange(s, m.id, m.id))  # type: ignore[misc]
            fields = cast(Mapping[bytes, bytes], reply[0][1]) if reply else {}
            self._dead_letter(message.shard, message.id, fields, f"cannot join the batch: {reason}", 1)
        return fit

    # -- public API -------------------------------------------------------------------

    def read(self, count: int | None = None, timeout: float | None = None) -> list[Message]:
        """Up to ``count`` messages (default ``read_count``), waiting at most ``timeout`` seconds
        for the first (None: until one comes; 0: not at all). ``ValueError`` names a bad argument."""
        if count is not None:
            count_arg("count", count, 1)
        if timeout is not None:
            seconds_arg("timeout", timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            messages = self._metered_fetch(count or self.read_count, int(max(remaining, 0.001) * 1000))
            if messages or (deadline is not None and time.monotonic() >= deadline):
                self.appetite.meter.delivered(sum(len(m.batch) for m in messages))
                return messages

    def _metered_fetch(self, count: int, block_ms: int) -> list[Message]:
        """:meth:`_fetch`, its time counted as starved unless it came back full (:class:`AppetiteMeter`)."""
        began = time.monotonic()
        messages = self._fetch(count, block_ms)
        self.appetite.meter.fetched(time.monotonic() - began, full=len(messages) >= count)
        return messages

    def __iter__(self) -> Iterator[Message]:
        """Messages forever (break out of the loop to stop); ack each one."""
        while True:
            yield from self.read()

    def ack(self, messages: Sequence[Message]) -> None:
        """Ack several messages in one round trip."""
        unacked = [m for m in messages if not m.acked]
        for shard in sorted({m.shard for m in unacked}):
            self._ack_ids(shard, [m.id for m in unacked if m.shard == shard])
        for message in messages:
            message.acked = True
            self._in_flight.discard((message.shard, message.id))

    def _ack_ids(self, shard: int, ids: list[str]) -> None:
        stream = self.shards[shard].keys.batches
        self._call(lambda: self.client.xack(stream, self.group, *ids))
        self.stats.acked += len(ids)

    def commit(self) -> None:
        """Ack the messages behind the last batch :meth:`get` returned."""
        uncommitted, self._uncommitted = self._uncommitted, []
        self.ack(uncommitted)

    def get(
        self,
        min_steps: int = 1,
        timeout: float | None = None,
        as_torch: bool = False,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
    ) -> Any:
        """One batch of at least ``min_steps`` rows, concatenated from whole messages.

        Returns a :class:`SampleBatch` (numpy, writable), or with ``as_torch`` a dict of
        column -> tensor on ``device`` (through pinned memory if ``pin_memory``), or
        ``None`` when ``timeout`` passes first. A ``weights_seq_no`` column is added from
        the metadata when the batch lacks one. Acks the previous ``get``'s messages.

        ``min_steps=0``: no minimum, no wait: the rows that are there now (one read that does
        not block), possibly none (an empty batch). ``timeout=0``: one read that does not
        block; the batch if ``min_steps`` rows are there, else ``None`` (the rows are kept
        for the next call). ``timeout=None`` waits as long as it takes. A negative or
        non-numeric ``min_steps`` or ``timeout`` raises ``ValueError`` naming it.
        """
        count_arg("min_steps", min_steps, 0)
        if timeout is not None:
            seconds_arg("timeout", timeout)
        self.commit()
        deadline = None if timeout is None else time.monotonic() + timeout
        polled = False  # a call short of rows reads at least once, whatever its timeout
        while (min_steps == 0 and not polled) or sum(len(m.batch) for m in self._carry) < min_steps:
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            if remaining <= 0 and polled:
                return None
            wait = 0.001 if min_steps == 0 else max(remaining, 0.001)
            fetched = self._metered_fetch(self.read_count, int(wait * 1000))
            polled = True
            self._schemas.saw([schema_of(m.batch) for m in fetched])
            # The held ones too: without a declaration, the reference may have moved on.
            self._carry = self._set_aside(self._carry + fetched)
        messages, self._carry = self._carry, []
        try:
            result = self._assemble(messages, as_torch, device, pin_memory)
        except BaseException:
            # Nothing is lost or acknowledged unseen: the next get() starts from these.
            self._carry = messages + self._carry
            raise
        self._uncommitted = messages
        self.appetite.meter.delivered(sum(len(m.batch) for m in messages))
        return result

    @staticmethod
    def _assemble(messages: list[Message], as_torch: bool, device: str | torch.device | None, pin_memory: bool) -> Any:
        columns = concat_messages(messages)
        if not as_torch:
            return SampleBatch(columns)
        import torch

        tensors = {}
        for name, array in columns.items():
            if array.dtype.kind == "U":  # agent ids: text has no tensor; agent_index is its number
                continue
            tensor = torch.from_numpy(array)
            if pin_memory:
                tensor = tensor.pin_memory()
            tensors[name] = tensor.to(device, non_blocking=pin_memory) if device is not None else tensor
        return tensors

    def lag(self) -> ConsumerLag:
        """Pending and undelivered entries of this group, the oldest pending one's age,
        and the policy-version lag of the rows last returned."""
        statuses = [self._call(lambda s=shard: read_stream_status(self.client, s.keys)) for shard in self.shards]  # type: ignore[misc]
        newest = self.policy_version if self.policy_version is not None else statuses[0].weights_seq_no
        policy_lag = None if newest is None or self._last_min_seq_no is None else newest - self._last_min_seq_no
        pending, undelivered, ages = 0, cast(int | None, 0), []
        for status in statuses:
            group = next((g for g in status.groups if g.name == self.group), None)
            if group is None:
                undelivered = None if undelivered is None else undelivered + status.length
                continue
            pending += group.pending
            undelivered = None if undelivered is None or group.undelivered is None else undelivered + group.undelivered
            ages += [] if group.oldest_pending_age_s is None else [group.oldest_pending_age_s]
        return ConsumerLag(pending, undelivered, max(ages) if ages else None, policy_lag)

    def close(self) -> None:
        """Close the connection; un-acked messages stay pending (and will be reclaimed)."""
        self.client.close()

    def __enter__(self) -> BatchConsumer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.commit()
        self.close()

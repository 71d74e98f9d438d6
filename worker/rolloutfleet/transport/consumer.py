"""Learner side: read a job's batches with consumer-group semantics (at-least-once).

    consumer = BatchConsumer("redis://127.0.0.1:6379/0", "cartpole")      # doctest: +SKIP
    for message in consumer:                                               # doctest: +SKIP
        train(message.batch, version=message.metadata.weights_seq_no)
        message.ack()
    batch = consumer.get(min_steps=4096, timeout=10.0)   # or one batch   # doctest: +SKIP

:class:`BatchConsumer` composes the pieces: the streams, group and reclaiming
(:mod:`~rolloutfleet.transport.consuming.group`), second copies (:mod:`~rolloutfleet.transport.duplicates`),
``max_policy_lag`` (:mod:`~rolloutfleet.transport.consuming.policy_lag`), dead letters
(:mod:`~rolloutfleet.transport.consuming.dead_letters`), the batch's columns
(:mod:`~rolloutfleet.transport.declared_columns`), torch output (:mod:`~rolloutfleet.transport.consuming.batch_tensors`).
Acks, reclaiming, poison entries, shards, a Redis that is away: docs/transport.md ("Consuming").
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.codec import DecodeError
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.appetite import AppetiteWriter
from rolloutfleet.transport.consuming.args import consumer_args, count_arg, entries_needed, seconds_arg
from rolloutfleet.transport.consuming.batch_tensors import as_tensors
from rolloutfleet.transport.consuming.dead_letters import (
    DEAD_LETTER_MAX_LEN,
    DeadLetters,
    RedisRefusedFull,
    refusing_oom,
)
from rolloutfleet.transport.consuming.group import ConsumerStreams, Entry, Shard
from rolloutfleet.transport.consuming.policy_lag import PolicyLag
from rolloutfleet.transport.consuming.stats import ConsumerLag, ConsumerStats, group_lag
from rolloutfleet.transport.consuming.wait import StarvedWait
from rolloutfleet.transport.declared_columns import SchemaReference, read_declared
from rolloutfleet.transport.duplicates import SeenBatches
from rolloutfleet.transport.entries import Message, check_versions, concat_messages, decode_entry, schema_of, take_rows
from rolloutfleet.transport.redis.backpressure import LEARNERS_TTL_MS, READING_SCRIPT, signal_room
from rolloutfleet.transport.redis.connection import DEFAULT_RECONNECT_TIMEOUT_S, JobClient
from rolloutfleet.transport.redis.errors import BackendError
from rolloutfleet.transport.redis.keys import DEFAULT_GROUP, JobKeys, job_keys
from rolloutfleet.transport.redis.stream_status import as_text, read_hold, read_stream_status, weights_version

if TYPE_CHECKING:
    import torch

__all__ = ["DEAD_LETTER_MAX_LEN", "BatchConsumer", "ConsumerLag", "ConsumerStats", "Message"]

SOCKET_MARGIN_S = 10.0  # a read's socket timeout is its BLOCK plus this


class BatchConsumer(JobClient):
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
        self.policy = policy
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        consumer_args(reclaim_idle_s, max_deliveries, read_count, block_s, reconnect_timeout_s, max_policy_lag)
        self.read_count = read_count
        self.block_s = block_s
        self.start = start
        self.stats = ConsumerStats()
        self._lag = PolicyLag(max_policy_lag, self.stats)
        # Silence longer than the BLOCK plus this margin is a Redis that is away (a retry
        # follows), well within the reconnect deadline.
        timeout = block_s + SOCKET_MARGIN_S if socket_timeout_s is None else socket_timeout_s
        super().__init__(redis_url, password, reconnect_timeout_s=reconnect_timeout_s, socket_timeout_s=timeout)
        self._streams = ConsumerStreams(
            self.client, self._retry, self._job_keys, group, self.consumer,
            start=start, reclaim_idle_s=reclaim_idle_s, fixed_shards=fixed_shards, stats=self.stats,
        )  # fmt: skip
        self._call = self._streams.call
        self._dead_letters = DeadLetters(self.client, self._call, group, self.consumer, max_deliveries, self.stats)
        self._reading = self.client.register_script(READING_SCRIPT)
        self.appetite = AppetiteWriter(self.client, self._job_keys, group, self.consumer)
        """Starved time and rows, written with the read stamps: the autoscaler's signal (:mod:`rolloutfleet.rules.autoscale_signals`)."""
        self._seen = SeenBatches()
        self._in_flight: set[tuple[int, str]] = set()
        self._carry: list[Message] = []
        self._entry_rows = 0  # rows an entry held, in the last read: get(max_steps=...) reads what it needs
        hold = lambda: read_hold(self.client, self._job_keys)  # noqa: E731 - one try: a diagnosis waits for nothing
        self._starved = StarvedWait(hold, group, self._job_keys.batches)  # a wait that cannot end says so
        self._uncommitted: list[Message] = []
        self._next_reading = 0.0
        self._announced: set[str] = set()  # the streams whose waiting publishers were told this learner reads
        self._schemas = SchemaReference(lambda: self._call(lambda: read_declared(self.client, self._job_keys)))
        """What get() judges batches against: the workers' declared columns, else the recent majority."""
        try:
            self._call(self._streams.follow)
        except BackendError:
            self.release_unread_groups()  # a stream refused after others got their group
            self.client.close()
            raise

    @property
    def keys(self) -> JobKeys:
        """The keys of the job (its first batch stream; :attr:`shards` has every one)."""
        return self._streams.keys

    @property
    def shards(self) -> list[Shard]:
        """The job's batch streams, each with this consumer's reclaim state."""
        return self._streams.shards

    @property
    def reclaim_idle_s(self) -> float:
        """Entries of the group not acked for this long are taken over (XAUTOCLAIM)."""
        return self._streams.reclaim_idle_s

    @reclaim_idle_s.setter
    def reclaim_idle_s(self, value: float) -> None:
        self._streams.reclaim_idle_s = value

    @property
    def max_deliveries(self) -> int:
        """An undecodable entry goes to the dead letters once delivered this many times."""
        return self._dead_letters.max_deliveries

    @max_deliveries.setter
    def max_deliveries(self, value: int) -> None:
        self._dead_letters.max_deliveries = value

    @property
    def max_policy_lag(self) -> int | None:
        """Rows more versions behind :attr:`policy_version` than this are dropped (None: none)."""
        return self._lag.max_policy_lag

    @max_policy_lag.setter
    def max_policy_lag(self, value: int | None) -> None:
        self._lag.max_policy_lag = value

    @property
    def policy_version(self) -> int | None:
        """The learner's current weights version; None: read the job's published version."""
        return self._lag.policy_version

    @policy_version.setter
    def policy_version(self, value: int | None) -> None:
        self._lag.policy_version = value

    # -- reading entries --------------------------------------------------------------

    def _read_entries(self, count: int, block_ms: int) -> list[Entry]:
        """``(shard, id, fields)`` of entries: idle ones reclaimed first, else new ones."""
        now = time.monotonic()
        self._streams.follow_when_due(now)
        reclaimed = self._streams.reclaim_when_due(now, count, self._in_flight)
        if reclaimed:
            return reclaimed
        if now >= self._next_reading:
            # Said on reads with entries or without: the fleet's backpressure waits only
            # for groups seen reading (rolloutfleet.transport.redis.backpressure), and a learner that has
            # caught up must not look gone. Twice a second is precise enough.
            self._next_reading = now + 0.5
            self._stamp()
        return self._streams.read_new(count, block_ms)

    def _stamp(self) -> None:
        """Mark this group as reading on every shard (:mod:`rolloutfleet.transport.redis.backpressure`)."""

        def stamp(shard: Shard) -> None:
            self._reading(keys=[shard.keys.learners], args=[self.group, LEARNERS_TTL_MS])
            if shard.keys.batches not in self._announced:  # a learner came: waiting publishers look again
                signal_room(self.client, shard.keys)
                self._announced.add(shard.keys.batches)

        for shard in self.shards:
            try:
                self._call(lambda shard=shard: refusing_oom(lambda: stamp(shard)))  # type: ignore[misc]
            except RedisRefusedFull:
                # Out of memory refuses the stamp, not the read: a learner draining a full
                # Redis is what frees it (the workers trim what it consumed).
                self._next_reading = 0.0
        with contextlib.suppress(RedisRefusedFull):
            self._call(lambda: refusing_oom(self.appetite.write))

    def _published_version(self) -> int | None:
        return weights_version(self._call(lambda: self.client.get(self.keys.weights_version)))

    # -- turning entries into messages ------------------------------------------------

    def _fetch(self, count: int, block_ms: int) -> list[Message]:
        entries = self._read_entries(count, block_ms)
        if not entries:
            return []
        newest = self._lag.newest(self._published_version, self.keys.weights_version)
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
                self._dead_letters.undecodable(self.shards[shard].keys, entry_id, fields, str(exc))
                continue
            if not self._seen.first_copy(metadata):
                self.stats.duplicates += 1
                drop.append((shard, entry_id))
                continue
            fresh = self._lag.fresh(batch, metadata, newest)
            if fresh is None:
                drop.append((shard, entry_id))
                continue
            self._in_flight.add((shard, entry_id))
            messages.append(Message(entry_id, fresh[0], metadata, self, shard))
            versions.append(fresh[1])
        for shard in sorted({shard for shard, _ in drop}):
            self._streams.ack(shard, [entry_id for s, entry_id in drop if s == shard])
        self.stats.delivered += len(messages)
        self._lag.delivered(versions)
        return messages

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
            self._seen.forget(message.metadata)
            keys = self.shards[message.shard].keys
            reply = self._call(lambda m=message, s=keys.batches: self.client.xrange(s, m.id, m.id))  # type: ignore[misc]
            fields = cast(Mapping[bytes, bytes], reply[0][1]) if reply else {}
            self._dead_letters.move(keys, message.id, fields, f"cannot join the batch: {reason}", 1)
            self._in_flight.discard((message.shard, message.id))
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
            self._streams.ack(shard, [m.id for m in unacked if m.shard == shard])
        for message in messages:
            message.acked = True
            self._in_flight.discard((message.shard, message.id))

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
        max_steps: int | None = None,
    ) -> Any:
        """One batch of at least ``min_steps`` rows, concatenated from whole messages (with
        ``max_steps``, at most that many rows: see below).

        Returns a :class:`SampleBatch` (numpy, writable), or with ``as_torch`` a dict of
        column -> tensor on ``device`` (through pinned memory if ``pin_memory``), or
        ``None`` when ``timeout`` passes first. A ``weights_seq_no`` column is added from
        the metadata when the batch lacks one. Acks the previous ``get``'s messages.

        ``min_steps=0``: no minimum, no wait: the rows that are there now (one read that does
        not block), possibly none (an empty batch). ``timeout=0``: one read that does not
        block; the batch if ``min_steps`` rows are there, else ``None`` (the rows are kept
        for the next call). ``timeout=None`` waits as long as it takes. A negative or
        non-numeric ``min_steps`` or ``timeout`` raises ``ValueError`` naming it.

        ``max_steps`` (>= ``min_steps``, 1): the batch ends there, the rest is the next ``get``'s;
        equal to ``min_steps``, exactly that many rows, as the ranks of a data-parallel learner
        need (docs/transport.md, "Learners of several ranks"; a message cut in two is
        acknowledged with its last rows).
        """
        count_arg("min_steps", min_steps, 0)
        if max_steps is not None:
            count_arg("max_steps", max_steps, max(1, min_steps))
        if timeout is not None:
            seconds_arg("timeout", timeout)
        self.commit()
        if not self._gather(min_steps, timeout, frugal=max_steps is not None):
            return None
        messages, self._carry = self._carry, []
        if max_steps is not None:
            messages, self._carry = take_rows(messages, max_steps)
        try:
            columns = concat_messages(messages)
            result = as_tensors(columns, device, pin_memory) if as_torch else SampleBatch(columns)
        except BaseException:
            # Nothing is lost or acknowledged unseen: the next get() starts from these.
            self._carry = messages + self._carry
            raise
        self._uncommitted = messages
        self.appetite.meter.delivered(sum(len(m.batch) for m in messages))
        return result

    def _gather(self, min_steps: int, timeout: float | None, frugal: bool = False) -> bool:
        """Read until ``min_steps`` rows are held (whether in time); ``frugal``: :func:`entries_needed`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        polled = False  # a call short of rows reads at least once, whatever its timeout
        self._starved.start(time.monotonic())
        while (missing := min_steps - sum(len(m.batch) for m in self._carry)) > 0 or (min_steps == 0 and not polled):
            self._starved.check(time.monotonic(), min_steps - missing, min_steps)
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            if remaining <= 0 and polled:
                return False
            wait = 0.001 if min_steps == 0 else max(remaining, 0.001)
            count = entries_needed(missing, self._entry_rows, self.read_count) if frugal else self.read_count
            fetched = self._metered_fetch(count, int(wait * 1000))
            self._entry_rows = sum(len(m.batch) for m in fetched) // len(fetched) if fetched else self._entry_rows
            polled = True
            self._schemas.saw([schema_of(m.batch) for m in fetched])
            # The held ones too: without a declaration, the reference may have moved on.
            self._carry = self._set_aside(self._carry + fetched)
        return True

    def lag(self) -> ConsumerLag:
        """Pending and undelivered entries of this group, the oldest pending one's age,
        and the policy-version lag of the rows last returned."""
        statuses = [self._call(lambda s=shard: read_stream_status(self.client, s.keys)) for shard in self.shards]  # type: ignore[misc]
        newest = self.policy_version if self.policy_version is not None else statuses[0].weights_seq_no
        return group_lag(statuses, self.group, self._lag.lag(newest))

    def release_unread_groups(self) -> list[str]:
        """Destroy the groups this consumer made and never read an entry from (a reader
        that failed while starting); the streams released. A group that handed out entries
        is kept: a restart resumes it."""
        return self._streams.release_unread()

    def close(self) -> None:
        """Close the connection; un-acked messages stay pending (and will be reclaimed)."""
        self.client.close()

    def __exit__(self, *exc: object) -> None:
        if not exc or exc[0] is None:  # on an error, the last get()'s messages stay pending
            self.commit()
        self.close()

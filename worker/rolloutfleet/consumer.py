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
dead-letter stream and acked.

**Duplicates and staleness.** A batch re-sent by a publisher after a lost reply carries
the same (producer, seq) and is dropped (acked, counted). With ``max_policy_lag=k``,
rows sampled with weights older than ``policy_version - k`` are dropped, judged row by
row from the batch's ``weights_seq_no`` column (a fragment can hold rows carried over
from before a weights update, older than the rest): the other rows of the batch are
delivered, and a batch with no row left is dropped whole (acked). Both are counted
(:attr:`ConsumerStats.stale_rows`, :attr:`ConsumerStats.stale`). ``policy_version`` is
the job's published weights version unless the learner sets it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
import redis

from rolloutfleet.batch import AGENT_ID, AGENT_INDEX, WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.codec import DecodeError, decode, decode_multi
from rolloutfleet.learners import LEARNERS_TTL_MS, READING_SCRIPT, group_idle_ms
from rolloutfleet.redis_connection import RetryLoop, connect
from rolloutfleet.redis_keys import DEFAULT_GROUP, JobKeys, job_keys
from rolloutfleet.spec import RolloutJob

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
T = TypeVar("T")

DEAD_LETTER_MAX_LEN = 10_000
_SEEN_CAPACITY = 1 << 16


@dataclass(frozen=True)
class BatchMetadata:
    """What the publisher wrote beside the payload."""

    worker_index: int
    weights_seq_no: int
    """The newest weights version among the batch's rows (its ``weights_seq_no`` column)."""
    env_steps: int
    created_at: float
    producer: str = ""
    seq: int = -1
    policy: str | None = None
    """The policy of a multi-agent job whose batch this is (None: single-agent)."""
    agent_ids: tuple[str, ...] = ()
    """Multi-agent: agent id of each ``agent_index`` in the batch."""
    weights_seq_no_min: int | None = None
    """The oldest weights version among the batch's rows (None: ``weights_seq_no``)."""

    def __post_init__(self) -> None:
        if self.weights_seq_no_min is None:
            # Entries of publishers older than the field: they wrote one version per batch.
            object.__setattr__(self, "weights_seq_no_min", self.weights_seq_no)

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> BatchMetadata:
        def number(name: bytes, kind: Callable[[str], Any]) -> Any:
            raw = fields.get(name)
            if raw is None:
                raise DecodeError(f"entry has no {name.decode()!r} field")
            try:
                return kind(raw.decode())
            except (ValueError, UnicodeDecodeError):
                raise DecodeError(f"field {name.decode()!r} is not a number: {raw[:40]!r}") from None

        return cls(
            worker_index=number(b"worker_index", int),
            weights_seq_no=number(b"weights_seq_no", int),
            env_steps=number(b"env_steps", int),
            created_at=number(b"created_at", float),
            producer=fields.get(b"producer", b"").decode("utf-8", "replace"),
            seq=int(fields[b"seq"]) if fields.get(b"seq", b"").isdigit() else -1,
            policy=fields[b"policy"].decode("utf-8", "replace") if b"policy" in fields else None,
            agent_ids=_agent_ids(fields.get(b"agent_ids")),
            weights_seq_no_min=number(b"weights_seq_no_min", int) if b"weights_seq_no_min" in fields else None,
        )


def _agent_ids(raw: bytes | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    try:
        ids = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise DecodeError(f"field 'agent_ids' is not JSON: {raw[:40]!r}") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DecodeError("field 'agent_ids' must be a JSON list of strings")
    return tuple(ids)


class Message:
    """One stream entry: ``batch`` (read-only zero-copy views), ``metadata``, ``ack()``."""

    __slots__ = ("_consumer", "acked", "batch", "id", "metadata")

    def __init__(
        self, entry_id: str, batch: SampleBatch, metadata: BatchMetadata, consumer: BatchConsumer | None
    ) -> None:
        self.id = entry_id
        self.batch = batch
        self.metadata = metadata
        self.acked = consumer is None  # read without a group: there is nothing to acknowledge
        self._consumer = consumer

    def ack(self) -> None:
        """Tell the group this entry is done; it will not be delivered again."""
        if self._consumer is not None:
            self._consumer.ack([self])

    def __repr__(self) -> str:
        return f"Message({self.id}, {len(self.batch)} rows, {self.metadata})"


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
    retries: int = 0


@dataclass(frozen=True)
class GroupStatus:
    name: str
    consumers: int
    pending: int
    undelivered: int | None
    """Entries not yet delivered to the group (XINFO lag); None when Redis cannot tell."""
    oldest_pending_age_s: float | None
    idle_s: float | None = None
    """Seconds since it was last seen reading (:mod:`rolloutfleet.learners`); None: never.
    Backpressure ignores a group idle for longer than the workers' ``learner_idle_s``."""


@dataclass(frozen=True)
class Hold:
    """Workers waiting on ``block`` backpressure for over a second, as they recorded it."""

    group: str | None
    """The learner group not keeping up; None: no group is a learner's (none has read recently)."""
    since: float
    """Unix time (Redis's clock) the earliest of the workers waiting on ``group`` began to wait."""
    held_s: float
    """How long that is ago, when the status was read."""
    unconsumed: int
    max_len: int
    ignored: tuple[str, ...]
    """Groups left out (idle for over ``learner_idle_s``)."""
    learner_idle_s: float


@dataclass(frozen=True)
class StreamStatus:
    """One job's stream as ``rolloutfleet streams`` shows it."""

    namespace: str
    job: str
    length: int
    dead_letters: int
    weights_seq_no: int | None
    groups: list[GroupStatus] = field(default_factory=list)
    hold: Hold | None = None
    """Who holds the workers back and since when, while they wait."""


@dataclass(frozen=True)
class ConsumerLag:
    """How far this consumer's group is behind."""

    pending: int
    undelivered: int | None
    oldest_pending_age_s: float | None
    policy_lag: int | None
    """Published weights version minus the oldest version among the last rows delivered."""


def read_stream_status(client: redis.Redis, keys: JobKeys) -> StreamStatus:
    """Length, groups (pending, lag, consumers, age of the oldest pending, idle time), dead
    letters, and who holds the workers back if they wait."""
    pipe = client.pipeline(transaction=False)
    pipe.xlen(keys.batches)
    pipe.xinfo_groups(keys.batches)
    pipe.xlen(keys.dead_letters)
    pipe.get(keys.weights_version)
    pipe.time()
    pipe.hgetall(keys.backpressure)
    pipe.hgetall(keys.learners)
    length, groups, dead, version, now, hold, reading = pipe.execute(raise_on_error=False)
    groups = [] if isinstance(groups, Exception) else groups
    now_ms = now[0] * 1000 + now[1] // 1000 if isinstance(now, tuple | list) else time.time() * 1000
    names = [_text(group["name"]) for group in groups]
    consumers = [
        client.xinfo_consumers(keys.batches, name) if int(g["consumers"]) else []
        for name, g in zip(names, groups, strict=True)
    ]
    idle_ms = group_idle_ms(names, consumers, reading, now)
    statuses = []
    for group in groups:
        name = group["name"].decode() if isinstance(group["name"], bytes) else str(group["name"])
        age = None
        if int(group["pending"]):
            summary = client.xpending(keys.batches, name)
            oldest = summary.get("min")
            if oldest:
                oldest_ms = int((oldest.decode() if isinstance(oldest, bytes) else oldest).split("-")[0])
                age = max(0.0, (now_ms - oldest_ms) / 1000)
        idle = idle_ms[name]
        lag = group.get("lag")
        statuses.append(
            GroupStatus(
                name,
                int(group["consumers"]),
                int(group["pending"]),
                None if lag is None else int(lag),
                age,
                None if idle is None else idle / 1000,
            )
        )
    return StreamStatus(
        keys.namespace,
        keys.job,
        0 if isinstance(length, Exception) else int(length),
        0 if isinstance(dead, Exception) else int(dead),
        _version(version),
        statuses,
        _hold(hold, now_ms),
    )


def _hold(raw: Any, now_ms: float) -> Hold | None:
    if not raw or isinstance(raw, Exception):
        return None
    fields = {_text(k): _text(v) for k, v in raw.items()}
    try:
        return Hold(
            group=fields.get("group") or None,
            since=int(fields["since"]) / 1000,
            held_s=max(0.0, (now_ms - int(fields["since"])) / 1000),
            unconsumed=int(fields["unconsumed"]),
            max_len=int(fields["max_len"]),
            ignored=tuple(name for name in fields.get("ignored", "").split(",") if name),
            learner_idle_s=float(fields.get("learner_idle_s", "nan")),
        )
    except (KeyError, ValueError):
        return None  # half-written by a worker of another version: show nothing rather than fail


def _version(raw: Any) -> int | None:
    if not raw or isinstance(raw, Exception):
        return None
    return int(raw.split()[0])


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
        reconnect_timeout_s: float = 30.0,
        policy: str | None = None,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        self.keys = job_keys(namespace, job, policy)
        self.policy = policy
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        if reclaim_idle_s <= 0:
            raise ValueError(f"reclaim_idle_s must be > 0, got {reclaim_idle_s}")
        if max_deliveries < 1:
            raise ValueError(f"max_deliveries must be >= 1, got {max_deliveries}")
        self.reclaim_idle_s = reclaim_idle_s
        self.max_deliveries = max_deliveries
        self.max_policy_lag = max_policy_lag
        self.policy_version: int | None = None
        """The learner's current weights version; None: read the job's published version."""
        self.read_count = read_count
        self.block_s = block_s
        self.start = start
        self.stats = ConsumerStats()
        self.client = connect(redis_url, password, socket_timeout=max(30.0, block_s + 20.0))
        self._reading = self.client.register_script(READING_SCRIPT)
        self._retry = RetryLoop(reconnect_timeout_s)
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._in_flight: set[str] = set()
        self._carry: list[Message] = []
        self._uncommitted: list[Message] = []
        self._next_reclaim = 0.0
        self._next_reading = 0.0
        self._reclaim_cursor = "0-0"
        self._last_min_seq_no: int | None = None
        self._call(self._create_group)

    # -- Redis calls ---------------------------------------------------------------------

    def _create_group(self) -> None:
        try:
            self.client.xgroup_create(self.keys.batches, self.group, id=self.start, mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

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
                self._create_group()
                return operation()

        def count_retry(exc: Exception) -> None:
            self.stats.retries += 1
            log.warning("redis unavailable for %s (%s); retrying", self.keys.batches, exc)

        return self._retry.call(attempt, on_retry=count_retry)

    def _read_entries(self, count: int, block_ms: int) -> tuple[list[tuple[bytes, Any]], bool]:
        now = time.monotonic()
        if now >= self._next_reclaim:
            self._next_reclaim = now + self.reclaim_idle_s / 2
            entries = self._reclaim(count)
            if entries:
                return entries, True

        def read() -> Any:
            pipe = self.client.pipeline(transaction=False)
            if now >= self._next_reading:
                # Said on reads with entries or without: the fleet's backpressure waits only
                # for groups seen reading (rolloutfleet.learners), and a learner that has
                # caught up must not look gone. Twice a second is precise enough, and spares
                # the pipeline's script check on most reads.
                self._next_reading = now + 0.5
                self._reading(keys=[self.keys.learners], args=[self.group, LEARNERS_TTL_MS], client=pipe)
            pipe.xreadgroup(self.group, self.consumer, {self.keys.batches: ">"}, count=count, block=max(block_ms, 1))
            return pipe.execute()[-1]

        reply = self._call(read)
        if not reply:
            return [], False
        return [entry for _, entries in cast(Any, reply) for entry in entries], False  # RESP2: [[stream, entries]]

    def _reclaim(self, count: int) -> list[tuple[bytes, Any]]:
        reply = self._call(
            lambda: self.client.xautoclaim(
                self.keys.batches,
                self.group,
                self.consumer,
                min_idle_time=int(self.reclaim_idle_s * 1000),
                start_id=self._reclaim_cursor,
                count=count,
            )
        )
        cursor, entries = reply[0], reply[1]
        self._reclaim_cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        if self._reclaim_cursor != "0-0":
            self._next_reclaim = 0.0  # more idle entries wait: keep claiming on the next read
        # Our own messages still in the learner's hands are not redeliveries.
        fresh = [(i, f) for i, f in entries if _text(i) not in self._in_flight]
        if fresh:
            self.stats.reclaimed += len(fresh)
            log.info("reclaimed %d idle entries of %s", len(fresh), self.keys.batches)
        return fresh

    def _current_policy_version(self) -> int | None:
        if self.policy_version is not None:
            return self.policy_version
        return _version(self._call(lambda: self.client.get(self.keys.weights_version)))

    # -- turning entries into messages ------------------------------------------------

    def _fetch(self, count: int, block_ms: int) -> list[Message]:
        entries, _ = self._read_entries(count, block_ms)
        if not entries:
            return []
        newest = self._current_policy_version() if self.max_policy_lag is not None else None
        messages: list[Message] = []
        versions: list[int] = []  # the oldest weights version of each message's rows
        drop: list[str] = []
        for raw_id, fields in entries:
            entry_id = _text(raw_id)
            if fields is None:  # deleted (trimmed) while pending
                drop.append(entry_id)
                continue
            try:
                batch, metadata = decode_entry(fields, self.policy)
                if newest is not None:
                    # Here, not where rows are judged: an entry that fails must not be
                    # remembered as seen, or its next delivery would pass for a duplicate.
                    _check_versions(batch)
            except DecodeError as exc:
                self._poisoned(entry_id, fields, str(exc))
                continue
            key = (metadata.producer, metadata.seq)
            if metadata.producer and key in self._seen:
                self.stats.duplicates += 1
                drop.append(entry_id)
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
                    drop.append(entry_id)
                    continue
                if stale_rows:
                    oldest = int(batch[WEIGHTS_SEQ_NO].min())
            self._in_flight.add(entry_id)
            messages.append(Message(entry_id, batch, metadata, self))
            versions.append(cast(int, oldest))
        if drop:
            self._ack_ids(drop)
        self.stats.delivered += len(messages)
        if versions:
            self._last_min_seq_no = min(versions)
        return messages

    def _poisoned(self, entry_id: str, fields: Mapping[bytes, bytes], reason: str) -> None:
        self.stats.decode_failures += 1
        detail = self._call(lambda: self.client.xpending_range(self.keys.batches, self.group, entry_id, entry_id, 1))
        deliveries = int(detail[0]["times_delivered"]) if detail else self.max_deliveries
        if deliveries < self.max_deliveries:
            log.warning("entry %s of %s: %s (delivery %d of %d; left pending for another try)",
                        entry_id, self.keys.batches, reason, deliveries, self.max_deliveries)  # fmt: skip
            return
        log.error("entry %s of %s: %s; moved to %s", entry_id, self.keys.batches, reason, self.keys.dead_letters)
        letter: dict[bytes | str, bytes | str | int] = {
            **{k: v for k, v in fields.items() if isinstance(k, bytes)},
            "dead_letter_reason": reason,
            "dead_letter_id": entry_id,
            "dead_letter_stream": self.keys.batches,
            "dead_letter_consumer": self.consumer,
            "dead_letter_deliveries": deliveries,
        }

        def move() -> None:
            pipe = self.client.pipeline(transaction=True)
            pipe.xadd(self.keys.dead_letters, letter, maxlen=DEAD_LETTER_MAX_LEN, approximate=True)  # type: ignore[arg-type]
            pipe.xack(self.keys.batches, self.group, entry_id)
            pipe.execute()

        self._call(move)
        self.stats.dead_lettered += 1

    # -- public API -------------------------------------------------------------------

    def read(self, count: int | None = None, timeout: float | None = None) -> list[Message]:
        """Up to ``count`` messages, waiting at most ``timeout`` seconds for the first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            messages = self._fetch(count or self.read_count, int(max(remaining, 0.001) * 1000))
            if messages or (deadline is not None and time.monotonic() >= deadline):
                return messages

    def __iter__(self) -> Iterator[Message]:
        """Messages forever (break out of the loop to stop); ack each one."""
        while True:
            yield from self.read()

    def ack(self, messages: Sequence[Message]) -> None:
        """Ack several messages in one round trip."""
        ids = [m.id for m in messages if not m.acked]
        if ids:
            self._ack_ids(ids)
        for message in messages:
            message.acked = True
            self._in_flight.discard(message.id)

    def _ack_ids(self, ids: list[str]) -> None:
        self._call(lambda: self.client.xack(self.keys.batches, self.group, *ids))
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
        """
        self.commit()
        deadline = None if timeout is None else time.monotonic() + timeout
        while sum(len(m.batch) for m in self._carry) < min_steps:
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            if remaining <= 0:
                return None
            self._carry.extend(self._fetch(self.read_count, int(max(remaining, 0.001) * 1000)))
        messages, self._carry = self._carry, []
        self._uncommitted = messages
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
        status = self._call(lambda: read_stream_status(self.client, self.keys))
        group = next((g for g in status.groups if g.name == self.group), None)
        newest = self.policy_version if self.policy_version is not None else status.weights_seq_no
        policy_lag = None if newest is None or self._last_min_seq_no is None else newest - self._last_min_seq_no
        if group is None:
            return ConsumerLag(0, status.length, None, policy_lag)
        return ConsumerLag(group.pending, group.undelivered, group.oldest_pending_age_s, policy_lag)

    def close(self) -> None:
        """Close the connection; un-acked messages stay pending (and will be reclaimed)."""
        self.client.close()

    def __enter__(self) -> BatchConsumer:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.commit()
        self.close()


def decode_entry(fields: Mapping[bytes, bytes], policy: str | None = None) -> tuple[SampleBatch, BatchMetadata]:
    """The batch and metadata of one stream entry (of ``policy``'s stream of a multi-agent
    job); raises :class:`DecodeError` saying what is wrong with it."""
    metadata = BatchMetadata.from_fields(fields)
    payload = fields.get(b"payload")
    if payload is None:
        raise DecodeError("entry has no 'payload' field")
    if policy is None:
        return decode(payload), metadata
    groups = decode_multi(payload)
    batch = groups.get(policy)
    if len(groups) != 1 or batch is None:
        raise DecodeError(f"payload holds policies {sorted(groups)}, expected exactly {policy!r}")
    if AGENT_INDEX not in batch or not metadata.agent_ids:
        return batch, metadata
    index = batch[AGENT_INDEX]
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(metadata.agent_ids)):
        raise DecodeError(f"agent_index out of range of the entry's {len(metadata.agent_ids)} agent_ids")
    return SampleBatch({**batch, AGENT_ID: np.asarray(metadata.agent_ids)[index]}), metadata


def fresh_rows(batch: SampleBatch, metadata: BatchMetadata, oldest_allowed: int) -> tuple[SampleBatch, int]:
    """The rows of ``batch`` sampled with weights version ``oldest_allowed`` or newer, and
    how many rows were dropped.

    Judged row by row from the ``weights_seq_no`` column: rows carried over from an earlier
    fragment can be older than the rest, so neither end of the batch speaks for all of it.
    A batch without the column (built by hand) has one version, its metadata's. Returns
    ``batch`` itself when every row is recent enough (the common case: one pass, no copy).
    """
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is None:
        if metadata.weights_seq_no >= oldest_allowed:
            return batch, 0
        return batch.rows(slice(0, 0)), len(batch)
    _check_versions(batch)
    if not len(column) or int(column.min()) >= oldest_allowed:
        return batch, 0
    fresh = column >= oldest_allowed
    return batch.rows(fresh), len(batch) - int(np.count_nonzero(fresh))


def _check_versions(batch: SampleBatch) -> None:
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is not None and (column.ndim != 1 or column.dtype.kind not in "iu"):
        raise DecodeError(
            f"column {WEIGHTS_SEQ_NO!r} must be one integer per row, got {column.dtype} of shape {column.shape}"
        )


def concat_messages(
    messages: Sequence[Message], extra: Mapping[str, Callable[[BatchMetadata], int]] | None = None
) -> dict[str, np.ndarray]:
    """Columns of all ``messages`` row-wise in one writable copy, plus per-row columns
    made from the metadata (``weights_seq_no`` unless the batches carry it, and ``extra``)."""
    if not messages:
        return {}
    names = list(messages[0].batch)
    for message in messages[1:]:
        if list(message.batch) != names and set(message.batch) != set(names):
            raise ValueError(f"entry {message.id} has columns {sorted(message.batch)}, expected {sorted(names)}")
    per_row: dict[str, Callable[[BatchMetadata], int]] = dict(extra or {})
    if WEIGHTS_SEQ_NO not in names:
        per_row.setdefault(WEIGHTS_SEQ_NO, lambda meta: meta.weights_seq_no)
    total = sum(len(m.batch) for m in messages)
    out: dict[str, np.ndarray] = {}
    for name in names:
        first = messages[0].batch[name]
        # Text columns (agent ids) differ in width from entry to entry: take the widest.
        dtype = np.result_type(*(m.batch[name] for m in messages)) if first.dtype.kind == "U" else first.dtype
        column = np.empty((total, *first.shape[1:]), dtype)
        start = 0
        for message in messages:
            part = message.batch[name]
            column[start : start + len(part)] = part
            start += len(part)
        out[name] = column
    for name, value_of in per_row.items():
        out[name] = np.repeat(
            np.array([value_of(m.metadata) for m in messages], np.int64), [len(m.batch) for m in messages]
        )
    return out


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

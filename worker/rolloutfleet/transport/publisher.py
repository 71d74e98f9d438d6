"""Worker side: put encoded batches on the job's Redis stream.

    >>> publisher = BatchPublisher("redis://127.0.0.1:6379/0", "cartpole")   # doctest: +SKIP
    >>> publisher.publish(runner.sample(), worker_index=0)  # doctest: +SKIP
    '1732262400000-0'

Each batch is one XADD (atomic: an entry is there whole or not at all) with the payload
and its metadata as fields:

| field | meaning |
| --- | --- |
| ``payload`` | :func:`rolloutfleet.data.codec.encode` of the batch |
| ``worker_index``, ``env_steps`` | who produced it, how many rows |
| ``weights_seq_no``, ``weights_seq_no_min`` | the newest and the oldest weights version among its rows |
| ``created_at`` | unix seconds when it was published |
| ``producer``, ``seq`` | a random id of this publisher and a per-publisher counter: the batch's identity |

**A batch is published once, whatever Redis does.** An XADD whose reply never came (Redis
paused past the socket timeout, the connection dropped) may still have been written: a
paused server executes what waited in its socket once it resumes. So a publish that failed
is re-sent with the same identity, within :meth:`BatchPublisher.publish`'s reconnect
window and also when the caller calls ``publish`` again with the same batch object (what
a worker does when its own loop retries the fragment in hand): the fields are those of the
first try, ``created_at`` included. Consumers drop the second copy (same producer and
seq) and count it; :attr:`PublisherStats.resent` counts the re-sends.

**Backpressure** (``spec.redis.backpressure``), judged by the entries the slowest *learner*
group has not finished (undelivered + pending). A consumer group is a learner's while it
reads: within ``learner_idle_s`` (default 120 s; workers:
``$ROLLOUTFLEET_LEARNER_IDLE_SECONDS``) a :class:`~rolloutfleet.transport.consumer.BatchConsumer`
of it has asked for entries, or entries were delivered to one of its consumers
(:mod:`rolloutfleet.spec.learners`). A group left behind by an inspection or by a learner that
is gone stops holding the fleet back once it has been idle that long. While no group is
a learner's, the whole stream counts: the fleet waits, ``max_len`` entries ahead, for a
learner to come (back).

* ``block``: once ``max_len`` entries are unconsumed, ``publish`` waits (polling every few
  ms) until the learner catches up, for at most ``block_timeout_s``, then raises
  :class:`BackpressureTimeout`. A wait longer than a second is written to the job's
  ``backpressure`` hash (the group holding the fleet back, since when, the groups left
  out), which ``rolloutfleet streams`` shows. The measurement rides in the same round trip as an XADD
  and decides whether the *next* publish waits; while the stream is less than half full
  it is repeated only every few publishes (spaced by the number of producers, at most
  16). So concurrent producers can overshoot ``max_len`` by about one entry each. The
  stream is trimmed only of what every learner group has consumed (XADD MINID: entries
  before the oldest one still pending or not yet delivered in any learner group, as of the
  last measurement), never by length: entries a learner that died left pending stay until
  another consumer of its group reclaims them, however far the others have read on.
* ``dropOldest``: XADD trims to about ``max_len`` entries (approximate trimming: whole
  radix-tree nodes, far cheaper than exact), and the number of trimmed entries that no
  group had been given yet is counted in :attr:`PublisherStats.dropped`.

**Redis out of memory** (``maxmemory`` reached, policy ``noeviction``: Redis refuses the
XADD, and with it the trimming the XADD would have done) is backpressure too: the
publisher trims what every learner group has consumed (XTRIM MINID, which Redis allows when
full; counted in :attr:`PublisherStats.trimmed`) and tries again, waiting for the learners
while nothing consumed is left, for at most ``block_timeout_s``; then it raises
:class:`RedisFull` (a :class:`BackpressureTimeout`: a worker waits and tries again, it does
not crash). ``dropOldest`` trims the oldest entries too when nothing consumed is left
(unread ones counted in ``dropped``). Waits are counted in ``oom_waits`` and
``oom_wait_seconds``.

**Size limit**: a payload above ``max_payload_bytes`` (default 32 MiB) is rejected with
:class:`PayloadTooLarge` rather than split: Redis serves one client at a time, so 8 MB+
entries already stall every worker and learner (measured), and chunked batches would need
reassembly state in every consumer. Sample smaller fragments or compress instead.

**Weights versions** come from the batch itself: its ``weights_seq_no`` column says, row
by row, which weights sampled it (a fragment can hold rows carried over from before the
last weights update). The metadata fields are the column's max and min, for readers that
want a summary without decoding; ``weights_seq_no`` stays the newest version, as it was
before ``weights_seq_no_min`` existed, so older consumers read new entries unchanged. A
batch without the column (one built by hand) is taken to be sampled, every row, with the
``weights_seq_no`` passed to :meth:`BatchPublisher.publish` (default 0).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np
import redis

from rolloutfleet.data.batch import WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.data.codec import Compression, encode, encode_multi
from rolloutfleet.spec.job import RedisSpec, RolloutJob
from rolloutfleet.spec.learners import DEFAULT_LEARNER_IDLE_S, StreamLoad, group_idle_ms, stream_load
from rolloutfleet.spec.redis_keys import job_keys
from rolloutfleet.transport.connection import (
    DEFAULT_RECONNECT_TIMEOUT_S,
    RETRYABLE,
    RetryLoop,
    connect,
    explain,
    is_cluster,
    node_client,
    where_url,
)
from rolloutfleet.transport.room import consumed_bound, drop_oldest, full_message, trim_consumed, undelivered
from rolloutfleet.transport.sharding import record_shards, shard_of

log = logging.getLogger(__name__)

Backpressure = Literal["block", "dropOldest"]
DEFAULT_MAX_PAYLOAD_BYTES = 32 << 20
PUBLISH_SOCKET_TIMEOUT_S = 20.0
REPLICA_WAIT_MS = 2000
"""On a Redis Cluster, how long a publish waits for a replica of its stream's master to
have the batch (WAIT); past it the batch counts as ``unreplicated``."""
"""A reply slower than this fails the attempt (a retry follows); it also bounds sending one
payload (32 MiB in 20 s: 13 Mbit/s)."""


class PayloadTooLarge(ValueError):
    """An encoded batch is larger than the publisher's ``max_payload_bytes``."""


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


class RedisFull(BackpressureTimeout):
    """Redis stayed out of memory (``maxmemory``, ``noeviction``) for ``block_timeout_s``
    though everything the learner groups had consumed was trimmed."""


class PublishInterrupted(RuntimeError):
    """:meth:`BatchPublisher.interrupt` was called while ``publish`` waited for room."""


@dataclass
class PublisherStats:
    """Counters since the publisher was made (export them as metrics)."""

    published: int = 0
    bytes: int = 0
    blocked: int = 0
    """Publishes that had to wait for room (``block``)."""
    blocked_seconds: float = 0.0
    block_timeouts: int = 0
    dropped: int = 0
    """Entries trimmed before any consumer group was given them (``dropOldest``)."""
    retries: int = 0
    """Redis calls that failed (connection lost, server loading) and were retried."""
    resent: int = 0
    """Calls of ``publish`` for a batch whose earlier call failed: re-sent with its identity
    (retries within one call are in ``retries``)."""
    oom_waits: int = 0
    """Publishes that found Redis out of memory (``maxmemory``) and waited for room."""
    oom_wait_seconds: float = 0.0
    trimmed: int = 0
    """Entries every learner group had consumed, trimmed to free memory for a refused XADD."""
    unreplicated: int = 0
    """On a Redis Cluster: batches no replica confirmed within ``REPLICA_WAIT_MS`` (a
    failover of their master right then could lose them)."""


_HOLD_RECORD_AFTER_S = 1.0  # shorter waits are the learner setting the pace, not news
_HOLD_RECORD_TTL_MS = 3000
# "since" is Redis's clock (no host's): when the holder began to hold. A fresh record dates
# from the start of the wait that writes it; a change of holder, from now; refreshes by
# other waiting workers keep it.
_HOLD_SCRIPT = """
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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _options(job: str | RolloutJob, namespace: str) -> tuple[str, str, RedisSpec, int]:
    if isinstance(job, RolloutJob):
        return job.namespace, job.name, job.spec.redis, job.spec.replicas
    return namespace, job, RedisSpec(), 0


class BatchPublisher:
    """Publishes batches of job ``namespace/job`` (or of a :class:`RolloutJob`, whose
    ``spec.redis`` supplies the defaults for ``max_len``, ``backpressure``,
    ``block_timeout_s`` and ``compression``).

    >>> with BatchPublisher(url, "cartpole", max_len=100, backpressure="dropOldest") as pub:  # doctest: +SKIP
    ...     entry_id = pub.publish(batch, worker_index=3)
    ...     pub.stats.dropped
    0

    ``reconnect_timeout_s``: how long one ``publish`` keeps retrying (with backoff) while
    Redis is unreachable before it raises
    :class:`~rolloutfleet.transport.connection.RedisUnavailable`; ``socket_timeout_s``: how
    long a reply may take before the attempt counts as failed (keep it below
    ``reconnect_timeout_s`` to leave room for retries; it also bounds sending one payload).

    ``learner_idle_s``: a consumer group whose consumers have not read for this long is
    not a learner's and does not hold ``block`` backpressure (see the module doc); make
    it longer than the learner's longest pause between reads.

    ``policy``: publish to that policy's stream of a multi-agent job
    (``rolloutfleet:{ns/job}:batches:<policy>``); each entry then also carries ``policy`` and
    ``agent_ids`` (JSON list: ``agent_index`` -> agent id) fields, and ``agent_steps``.

    ``worker_index``, ``shards``: a job with several batch streams
    (``spec.redis.shards``, see :mod:`rolloutfleet.transport.sharding`) is written on shard
    ``worker_index % shards``; ``shards`` defaults to the spec's, else to the Redis's default
    (1, or one per master of a Redis Cluster).
    """

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        max_len: int | None = None,
        backpressure: Backpressure | None = None,
        block_timeout_s: float | None = None,
        compression: Compression | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
        policy: str | None = None,
        learner_idle_s: float = DEFAULT_LEARNER_IDLE_S,
        socket_timeout_s: float = PUBLISH_SOCKET_TIMEOUT_S,
        worker_index: int = 0,
        shards: int | None = None,
    ) -> None:
        namespace, name, spec, replicas = _options(job, namespace)
        self.keys = job_keys(namespace, name, policy)
        self.policy = policy
        self.max_len = spec.max_len if max_len is None else max_len
        self.backpressure: Backpressure = spec.backpressure if backpressure is None else backpressure
        self.block_timeout_s = spec.block_timeout_seconds if block_timeout_s is None else block_timeout_s
        self.compression: Compression = spec.compression if compression is None else compression
        if self.max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {self.max_len}")
        if self.backpressure not in ("block", "dropOldest"):
            raise ValueError(f"backpressure must be 'block' or 'dropOldest', got {self.backpressure!r}")
        if learner_idle_s <= 0:
            raise ValueError(f"learner_idle_s must be > 0, got {learner_idle_s}")
        self.learner_idle_s = learner_idle_s
        self._groups: list[str] = []  # the stream's groups at the last measurement
        self._trim_before: str | None = None  # block: entries before this id are consumed (last measurement)
        self.max_payload_bytes = max_payload_bytes
        self.stats = PublisherStats()
        self.producer_id = uuid.uuid4().hex[:16]
        self._seq = 0
        # Unknown until the first round trip: a fresh publisher checks before its first XADD.
        self._full = self.backpressure == "block"
        self._until_check = 0
        self.producers = max(1, replicas)
        """How many publishers share the stream (the job's replicas), to space the checks."""
        self._interrupted = threading.Event()
        # interrupt() also ends a wait for a Redis that is away (a stopping worker drops the batch).
        self._retry = RetryLoop(reconnect_timeout_s, stop=self._interrupted, where=where_url(redis_url))
        self.job_client = self._retry.call(lambda: connect(redis_url, password, socket_timeout=socket_timeout_s))
        """The client for the job's other keys (a Redis Cluster client on a cluster)."""
        requested = spec.shards if shards is None else shards
        count = self._retry.call(lambda: record_shards(self.job_client, self.keys, requested))
        self.keys = self.keys.shard(shard_of(worker_index, count), count)
        self.producers = max(1, -(-self.producers // count))  # the publishers sharing this shard
        self._retry.client = self.job_client
        self.client = self.job_client
        """The client of the stream's node: on a cluster, its master's own (so an XADD and the
        WAIT after it share a connection); re-routed after a failover."""
        self._replicas = 0
        self._retry.call(self._route)
        self._hold_script = self.job_client.register_script(_HOLD_SCRIPT)
        self.on_wait: Callable[[str, StreamLoad, float], None] | None = None
        """Called about once a second while ``publish`` waits for room (``block``) with the
        stream, its load and the seconds waited: a worker says there that it waits for a
        learner (``load.group is None``) and stays live. Its exceptions end the publish."""
        self._unsent: tuple[Mapping[str, Any], dict[Any, Any]] | None = None
        """The batch whose publish failed, and the fields it was sent with (its identity)."""

    def publish(
        self,
        batch: Mapping[str, Any],
        weights_seq_no: int | None = None,
        worker_index: int = 0,
        env_steps: int | None = None,
        agent_ids: Sequence[str] | None = None,
    ) -> str:
        """XADD one batch; returns its stream entry id.

        The weights versions written beside it are those of its ``weights_seq_no`` column;
        ``weights_seq_no`` is only for a batch without that column (the version of all its
        rows, default 0): given with the column, it must agree with every row.

        Called again with the same batch object after it raised, it re-sends the batch with
        the identity of the first try (see the module doc): the failed XADD may have been
        written after all, and consumers then drop the second copy.

        Raises :class:`PayloadTooLarge`, :class:`BackpressureTimeout` (``block``; its
        subclass :class:`RedisFull` when Redis stays out of memory), or
        :class:`~rolloutfleet.transport.connection.RedisUnavailable` once Redis stayed away
        for ``reconnect_timeout_s``.
        """
        if self._unsent is not None and self._unsent[0] is batch:
            fields = self._unsent[1]
            self.stats.resent += 1
        else:
            fields = self._fields(batch, weights_seq_no, worker_index, env_steps, agent_ids)
            self._unsent = (batch, fields)

        def count_retry(exc: Exception) -> None:
            self.stats.retries += 1
            log.warning("redis unavailable while publishing to %s (%s); retrying", self.keys.batches, explain(exc))
            if is_cluster(self.job_client):
                with contextlib.suppress(*RETRYABLE, redis.exceptions.RedisClusterException):
                    self._route()  # the loop reads the slot map again first

        entry_id = self._retry.call(lambda: self._add(fields), on_retry=count_retry)
        self._unsent = None
        self.stats.published += 1
        self.stats.bytes += len(fields[b"payload"])
        return entry_id

    def _fields(
        self,
        batch: Mapping[str, Any],
        weights_seq_no: int | None,
        worker_index: int,
        env_steps: int | None,
        agent_ids: Sequence[str] | None,
    ) -> dict[Any, Any]:
        """The entry for a new batch, under the next seq of this producer."""
        oldest, newest = weights_versions(batch, weights_seq_no)
        if self.policy is not None:
            # One group named after the policy: the payload says whose it is on its own.
            payload = encode_multi({self.policy: _wire_columns(batch)}, self.compression)
        else:
            payload = encode(batch, self.compression)
        if len(payload) > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"batch encodes to {len(payload):,} bytes, above max_payload_bytes={self.max_payload_bytes:,} "
                f"for stream {self.keys.batches}: sample shorter fragments or enable compression"
            )
        if env_steps is None:
            env_steps = _rows(batch)
        fields: dict[Any, Any] = {
            b"payload": payload,
            b"worker_index": worker_index,
            b"weights_seq_no": newest,
            b"weights_seq_no_min": oldest,
            b"env_steps": env_steps,
            b"created_at": f"{time.time():.6f}",
            b"producer": self.producer_id,
            b"seq": self._seq,
        }
        if self.policy is not None:
            fields[b"policy"] = self.policy
            fields[b"agent_steps"] = _rows(batch)
            fields[b"agent_ids"] = json.dumps(list(agent_ids or ()))
        self._seq += 1
        return fields

    def _route(self) -> None:
        """On a cluster: the client of the master of the stream's slot, and whether it has a
        replica to wait for."""
        if not is_cluster(self.job_client):
            return
        cluster = cast(Any, self.job_client)
        self.client = node_client(self.job_client, self.keys.batches)
        slot = cluster.keyslot(self.keys.batches)
        self._replicas = min(1, len(cluster.nodes_manager.slots_cache.get(slot, [])) - 1)

    def _xadd(self, pipe: Any, key: str, fields: dict[Any, Any], **options: Any) -> None:
        """Queue the XADD, and on a cluster master with a replica a WAIT for one replica: a
        batch is published once a replica has it, so a failover does not lose it."""
        pipe.xadd(key, fields, **options)
        if self._replicas:
            pipe.execute_command("WAIT", self._replicas, REPLICA_WAIT_MS)

    def _replicated(self, acks: Any) -> None:
        if self._replicas and not isinstance(acks, Exception) and int(acks) < self._replicas:
            self.stats.unreplicated += 1

    def _add(self, fields: dict[Any, Any]) -> str:
        """XADD ``fields``; while Redis is out of memory, trim what the learners consumed and wait."""
        started: float | None = None
        delay = 0.01
        while True:
            try:
                entry_id = self._add_once(fields)
            except redis.exceptions.OutOfMemoryError:
                if started is None:
                    started = time.monotonic()
                    self.stats.oom_waits += 1
                    log.warning(
                        "redis refuses writes to %s: out of memory (maxmemory); trimming what the learners "
                        "consumed and waiting for room",
                        self.keys.batches,
                    )
                if self._make_room():
                    continue  # something was freed: try at once
                waited = time.monotonic() - started
                if self._interrupted.is_set():
                    self.stats.oom_wait_seconds += waited
                    raise PublishInterrupted(
                        f"gave up waiting for room in {self.keys.batches} (Redis out of memory): interrupted"
                    ) from None
                if waited >= self.block_timeout_s:
                    self.stats.oom_wait_seconds += waited
                    raise RedisFull(self._full_message(waited), stream=self.keys.batches, waited_s=waited) from None
                self._interrupted.wait(min(delay, self.block_timeout_s - waited))
                delay = min(delay * 2, 0.5)
                continue
            if started is not None:
                self.stats.oom_wait_seconds += time.monotonic() - started
            return entry_id

    def _add_once(self, fields: dict[Any, Any]) -> str:
        key = self.keys.batches
        if self.backpressure == "block":
            if self._full:
                self._wait_for_room()
            if self._until_check > 0:
                # Far from full: a bare XADD. Measuring costs a third of a publish, and
                # matters only near the limit (where the learner sets the pace anyway).
                self._until_check -= 1
                pipe = self.client.pipeline(transaction=False)
                self._xadd(pipe, key, fields, minid=self._trim_before, approximate=True)
                entry_id, *acks = pipe.execute()
                self._replicated(acks[0] if acks else None)
            else:
                # One round trip: the XADD, and what it left behind (decides the next publishes).
                pipe = self.client.pipeline(transaction=False)
                self._xadd(pipe, key, fields, minid=self._trim_before, approximate=True)
                self._queue_measure(pipe)
                entry_id, *replies = pipe.execute(raise_on_error=False)
                if isinstance(entry_id, Exception):
                    raise entry_id
                if self._replicas:
                    acks, *replies = replies
                    self._replicated(acks)
                unconsumed = self._load(replies).unconsumed
                self._full = unconsumed >= self.max_len
                # Skip checks while even every producer publishing that many times could
                # not fill more than half of the stream (at most 16, to notice a stalled learner).
                self._until_check = min(16, (self.max_len // 2 - unconsumed) // self.producers)
        else:
            pipe = self.client.pipeline(transaction=True)
            pipe.xlen(key)
            pipe.xinfo_groups(key)
            pipe.xadd(key, fields, maxlen=self.max_len, approximate=True)
            pipe.xlen(key)
            before, groups, entry_id, after = pipe.execute(raise_on_error=False)
            if isinstance(entry_id, Exception):
                raise entry_id
            trimmed = int(before) + 1 - int(after)
            if trimmed > 0:
                # The trim removes the oldest entries; the delivered ones come first.
                delivered = int(before) - undelivered(int(before), groups)
                self.stats.dropped += max(0, trimmed - delivered)
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def interrupt(self) -> None:
        """Make a ``publish`` blocked on a full stream give up now (safe from a signal handler);
        it raises :class:`PublishInterrupted` and the batch is not written. A ``publish``
        retrying while Redis is away re-raises its connection error instead of retrying on.
        Publishes that meet no full stream and no outage still go through."""
        self._interrupted.set()

    def unconsumed(self) -> int:
        """Entries of this job's stream the slowest learner group has not finished."""
        return self.load().unconsumed

    def load(self) -> StreamLoad:
        """The stream's load as ``block`` backpressure judges it (see the module doc)."""
        pipe = self.client.pipeline(transaction=False)
        self._queue_measure(pipe)
        return self._load(pipe.execute(raise_on_error=False))

    def _queue_measure(self, pipe: Any) -> None:
        # Consumers and pending summaries of the groups seen last time ride in the same
        # round trip; a new group costs one more (see _load).
        pipe.xlen(self.keys.batches)
        pipe.xinfo_groups(self.keys.batches)
        pipe.hgetall(self.keys.learners)
        pipe.time()
        pipe.xrevrange(self.keys.batches, count=1)  # the last entry: a group past it has nothing undelivered
        for name in self._groups:
            pipe.xinfo_consumers(self.keys.batches, name)
            pipe.xpending(self.keys.batches, name)

    def _load(self, replies: list[Any]) -> StreamLoad:
        length, groups, reading, now, last, *per_group = replies
        if isinstance(length, Exception):
            raise length
        names = [] if isinstance(groups, Exception) else [_text(g["name"]) for g in groups]
        if names != self._groups:
            self._groups = names
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.xinfo_consumers(self.keys.batches, name)
                pipe.xpending(self.keys.batches, name)
            per_group = pipe.execute(raise_on_error=False) if names else []
        consumers, pending = per_group[0::2], per_group[1::2]
        idle = group_idle_ms(names, consumers, reading, now)
        last_id = _text(last[0][0]) if isinstance(last, list) and last else None
        load = stream_load(int(length), groups, idle, self.learner_idle_s, last_id)
        learners = [(name, summary) for name, summary in zip(names, pending, strict=True) if name not in load.ignored]
        bound = None
        if load.group is not None and not any(isinstance(summary, Exception) for _, summary in learners):
            bound = consumed_bound(groups, [summary for _, summary in learners], [name for name, _ in learners])
        # Unknown (no learner group, a group gone meanwhile): no trimming until it is known.
        self._trim_before = None if bound is None else f"{bound[0]}-{bound[1]}"
        return load

    def _record_hold(self, load: StreamLoad, waited_s: float) -> None:
        """Say who holds the fleet back, for ``rolloutfleet streams``; the record expires once
        no waiting worker refreshes it. Skipped while Redis refuses writes (out of memory)."""
        with contextlib.suppress(redis.exceptions.OutOfMemoryError):
            self._record_hold_now(load, waited_s)

    def _record_hold_now(self, load: StreamLoad, waited_s: float) -> None:
        self._hold_script(
            keys=[self.keys.backpressure],
            args=[
                load.group or "",
                int(waited_s * 1000),
                load.unconsumed,
                self.max_len,
                ",".join(load.ignored),
                f"{self.learner_idle_s:g}",
                _HOLD_RECORD_TTL_MS,
            ],
        )

    def _wait_for_room(self) -> None:
        started = time.monotonic()
        delay = 0.001
        waited = False
        next_record = started + _HOLD_RECORD_AFTER_S
        while (load := self.load()).unconsumed >= self.max_len:
            unconsumed = load.unconsumed
            if self._interrupted.is_set():
                raise PublishInterrupted(f"gave up waiting for room in {self.keys.batches}: interrupted")
            waited_s = time.monotonic() - started
            if waited_s >= self.block_timeout_s:
                self.stats.blocked_seconds += waited_s
                self.stats.block_timeouts += 1
                reason = (
                    f"learner group {load.group!r} is not keeping up"
                    if load.group is not None
                    else f"no consumer group has read within {self.learner_idle_s:g} s: is the learner running?"
                )
                raise BackpressureTimeout(
                    f"stream {self.keys.batches} has held {unconsumed} unconsumed entries (maxLen {self.max_len}) "
                    f"for {waited_s:.1f} s (blockTimeoutSeconds {self.block_timeout_s:g}): {reason}",
                    stream=self.keys.batches,
                    group=load.group,
                    learner_absent=load.group is None,
                    waited_s=waited_s,
                )
            if time.monotonic() >= next_record:
                next_record = time.monotonic() + _HOLD_RECORD_AFTER_S
                self._record_hold(load, time.monotonic() - started)
                if self.on_wait is not None:
                    self.on_wait(self.keys.batches, load, time.monotonic() - started)
            waited = True
            self._interrupted.wait(min(delay, max(0.0, self.block_timeout_s - waited_s)))
            delay = min(delay * 2, 0.05)
        if waited:
            self.stats.blocked += 1
            self.stats.blocked_seconds += time.monotonic() - started
        self._full = False

    def trim_consumed(self) -> int:
        """Remove the entries every learner group has consumed (see :mod:`rolloutfleet.transport.room`);
        returns how many. Groups not counted as learners' (see the module doc) are not waited for."""
        load = self.load()
        learners = [name for name in self._groups if name not in load.ignored]
        if load.group is None:
            return 0  # no learner reads: nothing is consumed
        trimmed = trim_consumed(self.client, self.keys.batches, learners)
        self.stats.trimmed += trimmed
        if trimmed:
            log.info("trimmed %d consumed entries of %s to free memory", trimmed, self.keys.batches)
        return trimmed

    def _make_room(self) -> bool:
        """Redis refused an XADD for memory: free what may be freed; whether anything was."""
        if self.trim_consumed():
            return True
        if self.backpressure != "dropOldest":
            return False
        # dropOldest never waits for learners: the oldest entries go, unread ones counted.
        trimmed, unread = drop_oldest(self.client, self.keys.batches)
        self.stats.dropped += unread
        return trimmed > 0

    def _full_message(self, waited: float) -> str:
        try:
            load = self.load()
        except redis.RedisError:
            load = StreamLoad(0, None)
        reason = (
            f"learner group {load.group!r} has {load.unconsumed} unconsumed entries and nothing it consumed is left to "
            "trim: is the learner keeping up?"
            if load.group is not None
            else f"no consumer group has read within {self.learner_idle_s:g} s, so nothing is consumed to trim: "
            "is the learner running?"
        )
        return full_message(self.client, self.keys.batches, waited, self.block_timeout_s, reason)

    def close(self) -> None:
        self.client.close()
        if self.job_client is not self.client:
            self.job_client.close()

    def __enter__(self) -> BatchPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wire_columns(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The columns the wire carries: text columns (``agent_id``) travel as ``agent_ids`` metadata."""
    return {
        name: value for name, value in batch.items() if getattr(value, "dtype", None) is None or value.dtype.kind != "U"
    }


def _rows(batch: Mapping[str, Any]) -> int:
    if isinstance(batch, SampleBatch):
        return len(batch)
    return next((len(value) for value in batch.values()), 0)


def weights_versions(batch: Mapping[str, Any], default: int | None = None) -> tuple[int, int]:
    """(oldest, newest) weights version among the rows of ``batch``, from its
    ``weights_seq_no`` column; ``default`` (0 if None) for a batch without one.

    >>> weights_versions({"weights_seq_no": np.array([7, 3, 7])})
    (3, 7)
    """
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is None:
        version = 0 if default is None else int(default)
        return version, version
    versions = np.asarray(column)
    if versions.ndim != 1 or versions.dtype.kind not in "iu":
        raise ValueError(
            f"column {WEIGHTS_SEQ_NO!r} must be one integer per row, got {versions.dtype} of shape {versions.shape}"
        )
    if not len(versions):
        version = 0 if default is None else int(default)
        return version, version
    oldest, newest = int(versions.min()), int(versions.max())
    if default is not None and not oldest == newest == default:
        raise ValueError(
            f"weights_seq_no={default} passed with a batch whose {WEIGHTS_SEQ_NO!r} column holds versions "
            f"{oldest}..{newest}: the column is what is published; leave the argument out"
        )
    return oldest, newest

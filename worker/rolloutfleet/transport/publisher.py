"""Worker side: put encoded batches on the job's Redis stream, one XADD each (an entry is
there whole or not at all).

    >>> publisher = BatchPublisher("redis://127.0.0.1:6379/0", "cartpole")   # doctest: +SKIP
    >>> publisher.publish(runner.sample(), worker_index=0)  # doctest: +SKIP
    '1732262400000-0'

A batch is published once whatever Redis does: a failed publish is re-sent with the same
identity (``producer``, ``seq``) and consumers drop the second copy. ``block`` backpressure
is :mod:`rolloutfleet.transport.redis.backpressure`'s, a Redis out of memory
:mod:`rolloutfleet.transport.redis.room`'s, a cluster's replica ``WAIT`` :meth:`BatchPublisher._xadd`'s.
The entry's fields, each rule's why and the numbers behind them: docs/transport.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from rolloutfleet.data.codec import Compression
from rolloutfleet.spec.job import RedisSpec, RolloutJob
from rolloutfleet.transport.batch_entry import BatchEntries, PayloadTooLarge, weights_versions
from rolloutfleet.transport.redis.backpressure import (
    DEFAULT_LEARNER_IDLE_S,
    HOLD_SCRIPT,
    BackpressureMeter,
    BackpressureTimeout,
    PublishInterrupted,
)
from rolloutfleet.transport.redis.connection import (
    DEFAULT_RECONNECT_TIMEOUT_S,
    RETRYABLE,
    JobClient,
    explain,
    is_cluster,
    node_client,
)
from rolloutfleet.transport.redis.errors import ClusterError
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.redis.room import MemoryRoom, RedisFull, undelivered
from rolloutfleet.transport.redis.sharding import record_shards, shard_of
from rolloutfleet.transport.redis.stream_load import StreamLoad

log = logging.getLogger(__name__)

Backpressure = Literal["block", "dropOldest"]
DEFAULT_MAX_PAYLOAD_BYTES = 32 << 20
PUBLISH_SOCKET_TIMEOUT_S = 20.0
"""A reply slower than this fails the attempt (a retry follows); it also bounds sending one
payload (32 MiB in 20 s: 13 Mbit/s)."""
REPLICA_WAIT_MS = 2000
"""On a Redis Cluster, how long a publish waits for a replica of its stream's master to
have the batch (WAIT); past it the batch counts as ``unreplicated``."""

__all__ = [
    "BackpressureTimeout",
    "BatchPublisher",
    "PayloadTooLarge",
    "PublishInterrupted",
    "PublisherStats",
    "RedisFull",
    "StreamLoad",
    "weights_versions",
]


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


def _check_options(max_len: int, backpressure: str, learner_idle_s: float) -> None:
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if backpressure not in ("block", "dropOldest"):
        raise ValueError(f"backpressure must be 'block' or 'dropOldest', got {backpressure!r}")
    if learner_idle_s <= 0:
        raise ValueError(f"learner_idle_s must be > 0, got {learner_idle_s}")


def _options(job: str | RolloutJob, namespace: str) -> tuple[str, str, RedisSpec, int]:
    if isinstance(job, RolloutJob):
        return job.namespace, job.name, job.spec.redis, job.spec.replicas
    return namespace, job, RedisSpec(), 0


class BatchPublisher(JobClient):
    """Publishes batches of job ``namespace/job`` (or of a :class:`RolloutJob`, whose
    ``spec.redis`` supplies the defaults for ``max_len``, ``backpressure``,
    ``block_timeout_s`` and ``compression``).

    >>> with BatchPublisher(url, "cartpole", max_len=100, backpressure="dropOldest") as pub:  # doctest: +SKIP
    ...     entry_id = pub.publish(batch, worker_index=3)
    ...     pub.stats.dropped
    0

    ``reconnect_timeout_s``: how long one ``publish`` keeps retrying (with backoff) while
    Redis is unreachable before it raises
    :class:`~rolloutfleet.transport.redis.connection.RedisUnavailable`; ``socket_timeout_s``: how
    long a reply may take before the attempt counts as failed (keep it below
    ``reconnect_timeout_s`` to leave room for retries; it also bounds sending one payload).

    ``learner_idle_s``: a consumer group whose consumers have not read for this long is
    not a learner's and does not hold ``block`` backpressure (see the module doc); make
    it longer than the learner's longest pause between reads.

    ``policy``: publish to that policy's stream of a multi-agent job
    (``rolloutfleet:{ns/job}:batches:<policy>``); each entry then also carries ``policy`` and
    ``agent_ids`` (JSON list: ``agent_index`` -> agent id) fields, and ``agent_steps``.

    ``worker_index``, ``shards``: a job with several batch streams
    (``spec.redis.shards``, see :mod:`rolloutfleet.transport.redis.sharding`) is written on shard
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
        _check_options(self.max_len, self.backpressure, learner_idle_s)
        self.learner_idle_s = learner_idle_s
        self.max_payload_bytes = max_payload_bytes
        self.stats = PublisherStats()
        self._interrupted = threading.Event()
        # interrupt() also ends a wait for a Redis that is away (a stopping worker drops the batch).
        super().__init__(
            redis_url,
            password,
            reconnect_timeout_s=reconnect_timeout_s,
            socket_timeout_s=socket_timeout_s,
            stop=self._interrupted,
            large_values=True,  # the payload goes to the socket uncopied
        )
        self.job_client = self.client
        """The client for the job's other keys (a Redis Cluster client on a cluster)."""
        requested = spec.shards if shards is None else shards
        count = self._retry.call(lambda: record_shards(self.job_client, self.keys, requested))
        self.keys = self.keys.shard(shard_of(worker_index, count), count)
        self.client = self.job_client
        """The client of the stream's node: on a cluster, its master's own (so an XADD and the
        WAIT after it share a connection); re-routed after a failover."""
        self._compose(max(1, -(-max(1, replicas) // count)))  # the publishers sharing this shard
        self._replicas = 0
        self._retry.call(self._route)
        self.entries = BatchEntries(self.keys.batches, policy, self.compression, max_payload_bytes)
        """The identity of this producer's batches (``producer``, ``seq``), kept by a re-send."""

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
        :class:`~rolloutfleet.transport.redis.connection.RedisUnavailable` once Redis stayed away
        for ``reconnect_timeout_s``.
        """
        fields, resent = self.entries.entry(batch, weights_seq_no, worker_index, env_steps, agent_ids)
        self.stats.resent += resent

        def count_retry(exc: Exception) -> None:
            self.stats.retries += 1
            log.warning("redis unavailable while publishing to %s (%s); retrying", self.keys.batches, explain(exc))
            if is_cluster(self.job_client):
                with contextlib.suppress(*RETRYABLE, ClusterError):
                    self._route()  # the loop reads the slot map again first

        entry_id = self._retry.call(lambda: self._add(fields), on_retry=count_retry)
        self.entries.sent()
        self.stats.published += 1
        self.stats.bytes += len(fields[b"payload"])
        return entry_id

    def _compose(self, producers: int) -> None:
        """The pieces a publish goes through: the stream's meter (``block`` backpressure, and
        what trimming needs) and the handling of a Redis out of memory."""
        self.meter = BackpressureMeter(
            self.client,
            self.keys,
            max_len=self.max_len,
            block_timeout_s=self.block_timeout_s,
            learner_idle_s=self.learner_idle_s,
            producers=producers,
            interrupted=self._interrupted,
            stats=self.stats,
            hold_script=self.job_client.register_script(HOLD_SCRIPT),
        )
        """The stream's load, as ``block`` backpressure judges it (also what trims it)."""
        self.meter.full = self.backpressure == "block"  # unknown until the first round trip: check first
        self._room = MemoryRoom(
            self.meter, drop_oldest=self.backpressure == "dropOldest", interrupted=self._interrupted, stats=self.stats
        )

    @property
    def producer_id(self) -> str:
        """This publisher's random id: with each entry's ``seq``, its batches' identity."""
        return self.entries.producer_id

    @property
    def on_wait(self) -> Callable[[str, StreamLoad, float], None] | None:
        """Called after a second of waiting for room (``block``), then every two seconds, with the
        stream, its load and the seconds waited: a worker says there that it waits for a
        learner (``load.group is None``) and stays live. Its exceptions end the publish."""
        return self.meter.on_wait

    @on_wait.setter
    def on_wait(self, callback: Callable[[str, StreamLoad, float], None] | None) -> None:
        self.meter.on_wait = callback

    def _route(self) -> None:
        """On a cluster: the client of the master of the stream's slot, and whether it has a
        replica to wait for."""
        if not is_cluster(self.job_client):
            return
        cluster = cast(Any, self.job_client)
        self.client = self.meter.client = node_client(self.job_client, self.keys.batches)
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
        add = self._add_blocking if self.backpressure == "block" else self._add_dropping
        entry_id = self._room.add(lambda: add(fields))
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def _add_blocking(self, fields: dict[Any, Any]) -> Any:
        """``block``: wait for room when the last measurement found the stream full; the XADD
        trims what every learner group consumed (MINID), and carries the next measurement."""
        meter = self.meter
        if meter.full:
            meter.wait_for_room()
        measures = meter.measures_next()
        if not measures and not self._replicas:
            # One command: no pipeline (its bookkeeping cost ~6 us of a publish's CPU).
            return self.client.xadd(self.keys.batches, fields, minid=meter.trim_before, approximate=True)
        pipe = self.client.pipeline(transaction=False)
        self._xadd(pipe, self.keys.batches, fields, minid=meter.trim_before, approximate=True)
        if not measures:
            entry_id, *acks = pipe.execute()
            self._replicated(acks[0] if acks else None)
            return entry_id
        meter.queue_measure(pipe, script=False)  # the XADD's reply is the stream's last id
        entry_id, *replies = pipe.execute(raise_on_error=False)
        if isinstance(entry_id, Exception):
            raise entry_id
        if self._replicas:
            acks, *replies = replies
            self._replicated(acks)
        meter.measured(replies, added=entry_id)
        return entry_id

    def _add_dropping(self, fields: dict[Any, Any]) -> Any:
        """``dropOldest``: XADD trims to about ``max_len``; the trimmed entries no group had
        been given yet are counted as dropped."""
        key = self.keys.batches
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
        return entry_id

    def interrupt(self) -> None:
        """Make a ``publish`` blocked on a full stream give up now (safe from a signal handler);
        it raises :class:`PublishInterrupted` and the batch is not written. A ``publish``
        retrying while Redis is away re-raises its connection error instead of retrying on.
        Publishes that meet no full stream and no outage still go through."""
        self._interrupted.set()

    def unconsumed(self) -> int:
        """Entries of this job's stream the slowest learner group has not finished."""
        return self.meter.load().unconsumed

    def load(self) -> StreamLoad:
        """The stream's load as ``block`` backpressure judges it."""
        return self.meter.load()

    def trim_consumed(self) -> int:
        """Remove the entries every learner group has consumed; returns how many."""
        return self._room.trim_consumed()

    def close(self) -> None:
        """Close the connections (the stream's node's and, on a cluster, the job's)."""
        self.client.close()
        if self.job_client is not self.client:
            self.job_client.close()

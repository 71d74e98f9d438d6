"""The batch streams of a job as one consumer of a group reads them: every shard the workers
write (``spec.redis.shards``, followed as it changes), the group on each (made again when a
restarted Redis lost it), XREADGROUP across them, and XAUTOCLAIM of entries left idle by a
consumer that died. docs/transport.md ("Consuming") has the why."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from rolloutfleet.transport.consuming.stats import ConsumerStats
from rolloutfleet.transport.redis.backpressure import signal_room
from rolloutfleet.transport.redis.connection import RetryLoop
from rolloutfleet.transport.redis.errors import BackendError, Client, CommandRefused, OutOfMemory
from rolloutfleet.transport.redis.keys import JobKeys
from rolloutfleet.transport.redis.sharding import read_shards
from rolloutfleet.transport.redis.stream_status import as_text

log = logging.getLogger(__name__)
T = TypeVar("T")

SHARDS_REFRESH_S = 5.0
"""How often a consumer looks whether the job's workers write more (or fewer) batch streams."""
SHARD_BLOCK_MS = 50
"""With several streams, how long a read waits on one of them once none had anything."""

Entry = tuple[int, bytes, Any]
"""``(shard, id, fields)`` of a stream entry; ``fields`` is None for one trimmed while pending."""


class Call(Protocol):
    """A Redis call with the consumer's retries (:meth:`ConsumerStreams.call`)."""

    def __call__(self, operation: Callable[[], T]) -> T: ...


@dataclass
class Shard:
    """One batch stream of the job and this consumer's reclaim position in it."""

    keys: JobKeys
    reclaim_cursor: str = "0-0"
    next_reclaim: float = 0.0


class ConsumerStreams:
    """Consumer ``consumer`` of group ``group`` on each batch stream of ``job_keys``; a new
    group begins at ``start``. ``fixed_shards`` pins the number of streams (else the workers'
    record); ``stats`` gets the retries and the reclaimed entries."""

    def __init__(
        self,
        client: Client,
        retry: RetryLoop,
        job_keys: JobKeys,
        group: str,
        consumer: str,
        *,
        start: str,
        reclaim_idle_s: float,
        fixed_shards: int | None,
        stats: ConsumerStats,
    ) -> None:
        self.client = client
        self._retry = retry
        self._job_keys = job_keys
        self.group = group
        self.consumer = consumer
        self.start = start
        self.reclaim_idle_s = reclaim_idle_s
        self._fixed_shards = fixed_shards
        self._stats = stats
        self.shards: list[Shard] = []
        self.created: list[JobKeys] = []
        """The streams on which this consumer made the group (not those where it existed)."""
        self._next_follow = time.monotonic() + SHARDS_REFRESH_S
        self._turn = 0

    @property
    def keys(self) -> JobKeys:
        """The keys of the job (its first batch stream)."""
        return self.shards[0].keys if self.shards else self._job_keys

    def call(self, operation: Callable[[], T]) -> T:
        """``operation`` with reconnect/backoff, re-creating the group if Redis lost it."""

        def attempt() -> T:
            try:
                return operation()
            except CommandRefused as exc:
                # A restarted Redis without persistence has no stream and no group.
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("group %s of %s is gone (Redis restarted?); re-creating it", self.group, self.keys.batches)
                for shard in self.shards:
                    self.create_group(shard.keys)
                return operation()

        def count_retry(exc: Exception) -> None:
            self._stats.retries += 1
            log.warning("redis unavailable for %s (%s); retrying", self.keys.batches, exc)

        return self._retry.call(attempt, on_retry=count_retry)

    def follow(self) -> None:
        """Read every batch stream the job's workers write (``spec.redis.shards``): the
        number they recorded, else the Redis's default; groups made on new ones."""
        count = self._fixed_shards or read_shards(self.client, self._job_keys)
        if count == len(self.shards):
            return
        known = {shard.keys.batches: shard for shard in self.shards}
        shards = [known.get(keys.batches) or Shard(keys) for keys in self._job_keys.all_shards(count)]
        for shard in shards:
            if shard.keys.batches not in known:
                self.create_group(shard.keys)
        if self.shards:
            log.info("%s: reading %d batch stream(s), was %d", self._job_keys.tag, count, len(self.shards))
        self.shards = shards

    def follow_when_due(self, now: float) -> None:
        """:meth:`follow`, every :data:`SHARDS_REFRESH_S`."""
        if now >= self._next_follow:
            self._next_follow = now + SHARDS_REFRESH_S
            self.call(self.follow)

    def create_group(self, keys: JobKeys) -> None:
        try:
            self.client.xgroup_create(keys.batches, self.group, id=self.start, mkstream=True)
            self.created.append(keys)
        except OutOfMemory:
            # Refused before Redis looked: a group that exists is all we need.
            if self.group not in self._groups(keys):
                raise
        except CommandRefused as exc:
            if "BUSYGROUP" in str(exc):
                return
            if "WRONGTYPE" in str(exc):
                raise CommandRefused(
                    f"{keys.batches} holds a {as_text(self.client.type(keys.batches))}, not a stream: "
                    "something else wrote that key"
                ) from None
            raise

    def release_unread(self) -> list[str]:
        """Destroy the groups this consumer made that never handed out an entry (nothing
        delivered or reclaimed here, none pending in Redis): a reader that failed while it
        started leaves no group to be waited for. Returns the streams released; a group
        Redis will not destroy (the user may not) is logged and kept."""
        if self._stats.delivered or self._stats.reclaimed:
            return []
        released = []
        for keys in self.created:
            try:
                info = {as_text(g["name"]): g for g in self.client.xinfo_groups(keys.batches)}.get(self.group)
                if info is None or int(info["pending"]):
                    continue
                self.client.xgroup_destroy(keys.batches, self.group)
                released.append(keys.batches)
            except BackendError as exc:
                log.warning("group %s of %s is left (%s); a block fleet stops waiting for it after it is idle",
                            self.group, keys.batches, exc)  # fmt: skip
        self.created = [keys for keys in self.created if keys.batches not in released]
        return released

    def _groups(self, keys: JobKeys) -> list[str]:
        try:
            return [as_text(g["name"]) for g in self.client.xinfo_groups(keys.batches)]
        except CommandRefused:  # no stream
            return []

    def reclaim_when_due(self, now: float, count: int, in_flight: Collection[tuple[int, str]]) -> list[Entry]:
        """Entries idle for ``reclaim_idle_s`` on the first shard whose turn it is (every
        ``reclaim_idle_s / 2``), but for those still in this consumer's hands (``in_flight``)."""
        for index, shard in enumerate(self.shards):
            if now >= shard.next_reclaim:
                shard.next_reclaim = now + self.reclaim_idle_s / 2
                entries = self._reclaim(index, count, in_flight)
                if entries:
                    return [(index, entry_id, fields) for entry_id, fields in entries]
        return []

    def _reclaim(self, index: int, count: int, in_flight: Collection[tuple[int, str]]) -> list[tuple[bytes, Any]]:
        shard = self.shards[index]
        reply = self.call(
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
        fresh = [(i, f) for i, f in entries if (index, as_text(i)) not in in_flight]
        if fresh:
            self._stats.reclaimed += len(fresh)
            log.info("reclaimed %d idle entries of %s", len(fresh), shard.keys.batches)
        return fresh

    def read_new(self, count: int, block_ms: int) -> list[Entry]:
        """Up to ``count`` new entries of each stream, waiting at most ``block_ms`` for some."""
        if len(self.shards) == 1:
            return self._read_shards([0], count, max(block_ms, 1))
        # Several streams: one look at each without blocking, then a short block on one in
        # turn (a BLOCK on one stream cannot see the others).
        found = self._read_shards(list(range(len(self.shards))), count, None)
        if not found:
            self._turn = (self._turn + 1) % len(self.shards)
            found = self._read_shards([self._turn], count, max(1, min(block_ms, SHARD_BLOCK_MS)))
        return found

    def _read_shards(self, indices: list[int], count: int, block_ms: int | None) -> list[Entry]:
        def read() -> list[Any]:
            streams: list[dict[Any, Any]] = [{self.shards[index].keys.batches: ">"} for index in indices]
            if len(streams) == 1:  # one command: no pipeline and its bookkeeping
                return [self.client.xreadgroup(self.group, self.consumer, streams[0], count=count, block=block_ms)]
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xreadgroup(self.group, self.consumer, stream, count=count, block=block_ms)
            replies = pipe.execute(raise_on_error=False)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            return replies

        replies = self.call(read)
        return [
            (index, entry_id, fields)
            for index, reply in zip(indices, replies, strict=True)
            for _, entries in reply or []  # RESP2: [[stream, entries]]
            for entry_id, fields in entries
        ]

    def ack(self, shard: int, ids: list[str]) -> None:
        """XACK ``ids`` on stream ``shard``."""
        keys = self.shards[shard].keys

        def ack() -> None:
            pipe = self.client.pipeline(transaction=False)  # one slot: the stream's tag
            pipe.xack(keys.batches, self.group, *ids)
            signal_room(pipe, keys)  # room freed: publishers waiting for it wake
            acked, _ = pipe.execute(raise_on_error=False)
            # A signal refused (Redis out of memory) is no failed ack: waiting publishers
            # measure again within seconds anyway.
            if isinstance(acked, Exception):
                raise acked

        self.call(ack)
        self._stats.acked += len(ids)

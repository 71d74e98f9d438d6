"""Look at a job's batches without consuming them: no consumer group, nothing acknowledged,
nothing left behind in Redis, so looking never holds the fleet back.

    reader = BatchReader("redis://127.0.0.1:6379/0", "cartpole")   # doctest: +SKIP
    for message in reader.read(count=10, timeout=30.0):            # doctest: +SKIP
        print(message.id, len(message.batch), message.metadata.weights_seq_no)

Reading starts at the oldest entry still in the stream and goes on with new ones as
workers publish them (XREAD). Under ``block`` backpressure the fleet does not run ahead
of its learners: with no learner reading, the stream holds about ``maxLen`` entries and
no more are published until one reads. An entry that cannot be decoded is skipped and
counted (learners' consumers dead-letter it; a reader changes nothing); so is a second
copy of a batch (same producer and seq). A job with several batch streams
(``spec.redis.shards``) is read on every one (as many as its workers recorded).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, cast

from rolloutfleet.data.codec import DecodeError
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.duplicates import SeenBatches
from rolloutfleet.transport.entries import Message, decode_entry
from rolloutfleet.transport.redis.connection import DEFAULT_RECONNECT_TIMEOUT_S, JobClient
from rolloutfleet.transport.redis.errors import CommandRefused
from rolloutfleet.transport.redis.keys import job_keys, parse_shard
from rolloutfleet.transport.redis.sharding import read_shards


@dataclass
class ReaderStats:
    delivered: int = 0
    duplicates: int = 0
    decode_failures: int = 0
    """Entries skipped because they could not be decoded."""


class BatchReader(JobClient):
    """Reads batches of job ``namespace/job`` (one policy's of a multi-agent job) without a
    consumer group; see the module doc."""

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        policy: str | None = None,
        block_s: float = 1.0,
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        keys = job_keys(namespace, job, policy)
        self.policy = policy
        self.block_s = block_s
        self.stats = ReaderStats()
        self.positions: dict[str, str] = {}
        """Stream -> the id of the last entry read there: the next read returns what follows it."""
        # A BLOCK's silence plus a margin, well within the reconnect deadline (retries fit in it).
        super().__init__(redis_url, password, reconnect_timeout_s=reconnect_timeout_s, socket_timeout_s=block_s + 10.0)
        self.shards = self._retry.call(lambda: keys.all_shards(read_shards(self.client, keys)))
        self.keys = self.shards[0]
        self.positions = {shard.batches: "0-0" for shard in self.shards}
        self._turn = 0
        self._seen = SeenBatches()

    def read(self, count: int = 16, timeout: float | None = None) -> list[Message]:
        """Up to ``count`` messages, waiting at most ``timeout`` seconds for the first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = self.block_s if deadline is None else min(self.block_s, deadline - time.monotonic())
            messages = self._fetch(count, int(max(remaining, 0.001) * 1000))
            if messages or (deadline is not None and time.monotonic() >= deadline):
                return messages

    def _xread(self, streams: list[str], count: int, block_ms: int | None) -> list[Any]:
        """XREAD on each stream (one slot each: a pipeline, not one multi-key call)."""

        def read() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for stream in streams:
                pipe.xread({stream: self.positions[stream]}, count=count, block=block_ms)
            return [entry for reply in pipe.execute() for entry in reply or []]

        return self._retry.call(read)

    def _fetch(self, count: int, block_ms: int) -> list[Message]:
        try:
            streams = [shard.batches for shard in self.shards]
            if len(streams) == 1:
                reply = self._xread(streams, count, max(block_ms, 1))
            else:  # a look at each, then a short BLOCK on one in turn
                reply = self._xread(streams, count, None)
                if not reply:
                    self._turn = (self._turn + 1) % len(streams)
                    reply = self._xread([streams[self._turn]], count, max(1, min(block_ms, 50)))
        except CommandRefused as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            kind = self.client.type(self.keys.batches)
            raise CommandRefused(
                f"{self.keys.batches} holds a {kind.decode() if isinstance(kind, bytes) else kind}, not a stream: "
                "something else wrote that key"
            ) from None
        messages = []
        for stream, entries in reply:  # RESP2: [[stream, entries]]
            for raw_id, fields in entries:
                entry_id = raw_id.decode() if isinstance(raw_id, bytes) else str(raw_id)
                self.positions[stream.decode() if isinstance(stream, bytes) else str(stream)] = entry_id
                try:
                    batch, metadata = decode_entry(cast(dict[bytes, bytes], fields), self.policy)
                except DecodeError:
                    self.stats.decode_failures += 1
                    continue
                if not self._seen.first_copy(metadata):
                    self.stats.duplicates += 1
                    continue
                messages.append(Message(entry_id, batch, metadata, None, parse_shard(stream)))
        self.stats.delivered += len(messages)
        return messages

    def groups(self) -> list[str]:
        """The stream's consumer groups (a reader never makes one)."""
        try:
            groups = self.client.xinfo_groups(self.keys.batches)
        except CommandRefused:  # no stream yet
            return []
        return [g["name"].decode() if isinstance(g["name"], bytes) else str(g["name"]) for g in groups]

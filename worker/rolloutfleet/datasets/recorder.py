"""``rolloutfleet record``: follow a job's batch stream into a recording folder.

The recorder reads as its own consumer group (``recorder``), so it never takes a batch from
a learner: every group gets every entry. It is a reader like a learner, so under ``block``
backpressure the fleet waits for it too and it misses nothing (a slow disk slows the
fleet); under ``dropOldest`` an entry trimmed before it was read is gone for it as for any
learner. Each batch read is spooled and fsynced before its entry is acknowledged, and the
acknowledgement follows at once, so the recorder holds no entries pending while episodes
finish (a Minari recording would otherwise stall a ``block`` fleet with a short stream).

Killed at any point and started again on the same folder, it loses and duplicates nothing:
entries not spooled are still pending in its group (claimed again after ``reclaim_s``);
entries spooled but not acknowledged are acknowledged first; files written after the
last committed state are removed and made again from the spool.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rolloutfleet.datasets.writer import DatasetWriter
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message, concat_messages
from rolloutfleet.transport.redis.errors import BackendError

log = logging.getLogger(__name__)

RECORDER_GROUP = "recorder"
WORKER_INDEX = "worker_index"
"""The column added from each entry's metadata: the worker that sampled the rows."""


@dataclass
class RecorderStats:
    entries: int = 0
    rows: int = 0
    skipped: int = 0
    """Entries whose columns could not join the recording (logged with the column)."""
    resumed: int = 0
    """Entries spooled before a restart and acknowledged when it began."""


class Recorder:
    """Reads ``job``'s (one policy's) batches as group ``group`` into ``writer``."""

    def __init__(self, redis_url: str, job: str | RolloutJob, writer: DatasetWriter, *, namespace: str = "default",
                 policy: str | None = None, group: str = RECORDER_GROUP, password: str | None = None,
                 flush_s: float = 10.0, reclaim_s: float = 5.0, read_count: int = 64) -> None:  # fmt: skip
        self.writer = writer
        self.flush_s = flush_s
        self.stats = RecorderStats()
        self.consumer = BatchConsumer(redis_url, job, namespace, group=group, consumer=f"{group}-0",
                                      reclaim_idle_s=reclaim_s, password=password, policy=policy,
                                      read_count=read_count, block_s=0.5)  # fmt: skip
        try:
            self._acknowledge_spooled()
        except BackendError:
            with contextlib.suppress(BackendError):
                self.consumer.release_unread_groups()
            self.close()
            raise
        self._last_flush = time.monotonic()

    def _acknowledge_spooled(self) -> None:
        """Entries spooled just before a kill may still be pending: acknowledge them now (the
        spool has their rows), before they come again and are written twice."""
        by_stream: dict[str, list[str]] = {}
        for stream, entry_id in self.writer.spooled_entries():
            by_stream.setdefault(stream, []).append(entry_id)
        for stream, ids in by_stream.items():
            for start in range(0, len(ids), 1000):
                self.stats.resumed += int(
                    self.consumer.client.xack(stream, self.consumer.group, *ids[start : start + 1000])
                )
        if self.stats.resumed:
            log.info("resumed: %d entries were spooled before the last stop, acknowledged now", self.stats.resumed)

    def _stream(self, message: Message) -> str:
        return self.consumer.shards[message.shard].keys.batches

    def step(self, timeout: float = 1.0) -> int:
        """Read what is there (waiting at most ``timeout``), spool it, acknowledge it; flush
        when ``flush_s`` passed. Returns the rows recorded."""
        messages = self.consumer.read(timeout=timeout)
        fit = self._fitting(messages)
        rows = 0
        if fit:
            columns = concat_messages(fit, extra={WORKER_INDEX: lambda meta: meta.worker_index})
            self.writer.write(columns, [(self._stream(m), m.id) for m in fit], roll=False)  # durable before the ack
            rows = sum(len(m.batch) for m in fit)
        self.consumer.ack(messages)
        self.stats.entries += len(fit)
        self.stats.rows += rows
        if time.monotonic() - self._last_flush >= self.flush_s or self.writer.spooled_bytes >= self.writer.roll_bytes:
            self.flush()
        return rows

    def _fitting(self, messages: Sequence[Message]) -> list[Message]:
        fit: list[Message] = []
        for message in messages:
            problem = self.writer.misfit({**message.batch, WORKER_INDEX: np.empty(0, np.int64)})
            if problem is None and fit:
                problem = None if set(message.batch) == set(fit[0].batch) else "columns differ within one read"
            if problem is None:
                fit.append(message)
                continue
            self.stats.skipped += 1
            log.error("entry %s of %s not recorded: %s", message.id, self._stream(message), problem)
        return fit

    def flush(self) -> None:
        self.writer.flush()
        self._last_flush = time.monotonic()

    def run(self, stop: Callable[[], bool]) -> None:
        """Record until ``stop()``; then write what is spooled. Redis errors propagate."""
        try:
            while not stop():
                self.step()
        finally:
            self.flush()

    def close(self) -> None:
        with contextlib.suppress(BackendError):
            self.consumer.close()

"""Entries no learner can use, moved with the reason to the job's dead-letter stream (and
acked): undecodable ones once delivered ``max_deliveries`` times (another consumer, with the
compression library, may succeed), and ones that cannot join a batch at once. While Redis is
out of memory none can be written: the entry stays pending, judged again when it comes back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TypeVar

from rolloutfleet.transport.consuming.group import Call
from rolloutfleet.transport.consuming.stats import ConsumerStats
from rolloutfleet.transport.redis.backpressure import signal_room
from rolloutfleet.transport.redis.errors import Client, OutOfMemory, TransactionAborted
from rolloutfleet.transport.redis.keys import JobKeys

log = logging.getLogger(__name__)
T = TypeVar("T")

DEAD_LETTER_MAX_LEN = 10_000


class RedisRefusedFull(Exception):
    """Redis is out of memory: an OutOfMemoryError kept from the retry loop."""


def refusing_oom(operation: Callable[[], T]) -> T:
    """``operation()``, with Redis out of memory raised as :class:`RedisRefusedFull` (which a
    :class:`~rolloutfleet.transport.redis.connection.RetryLoop` does not retry)."""
    try:
        return operation()
    except (OutOfMemory, TransactionAborted) as exc:
        if isinstance(exc, TransactionAborted) and "OOM" not in str(exc) and "memory" not in str(exc):
            raise
        raise RedisRefusedFull(str(exc)) from exc


class DeadLetters:
    """Consumer ``consumer`` of group ``group`` moving entries to the dead letters through
    ``call`` (its retries); ``stats`` counts them."""

    def __init__(
        self, client: Client, call: Call, group: str, consumer: str, max_deliveries: int, stats: ConsumerStats
    ) -> None:
        self.client = client
        self._call = call
        self.group = group
        self.consumer = consumer
        self.max_deliveries = max_deliveries
        self._stats = stats

    def undecodable(self, keys: JobKeys, entry_id: str, fields: Mapping[bytes, bytes], reason: str) -> None:
        """An entry of stream ``keys.batches`` that cannot be decoded: left pending for another
        try until delivered ``max_deliveries`` times, then moved."""
        self._stats.decode_failures += 1
        detail = self._call(lambda: self.client.xpending_range(keys.batches, self.group, entry_id, entry_id, 1))
        deliveries = int(detail[0]["times_delivered"]) if detail else self.max_deliveries
        if deliveries < self.max_deliveries:
            log.warning("entry %s of %s: %s (delivery %d of %d; left pending for another try)",
                        entry_id, keys.batches, reason, deliveries, self.max_deliveries)  # fmt: skip
            return
        self.move(keys, entry_id, fields, reason, deliveries)

    def move(self, keys: JobKeys, entry_id: str, fields: Mapping[bytes, bytes], reason: str, deliveries: int) -> bool:
        """Move an entry with ``reason`` to its stream's dead letters (and ack it); whether it was
        moved (not while Redis is out of memory: it is left pending, to be reclaimed and judged again)."""
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
            signal_room(pipe, keys)
            pipe.execute()

        try:
            # Not retried through a full Redis: the entry waits in the group instead.
            self._call(lambda: refusing_oom(move))
        except RedisRefusedFull:
            log.warning("entry %s of %s: %s; left pending: Redis is out of memory, no dead letter can be written",
                        entry_id, keys.batches, reason)  # fmt: skip
            return False
        log.error("entry %s of %s: %s; moved to %s", entry_id, keys.batches, reason, keys.dead_letters)
        self._stats.dead_lettered += 1
        return True

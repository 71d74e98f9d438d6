"""What a :class:`~rolloutfleet.transport.consumer.BatchConsumer` counts and how far behind
its group is: the counters each of its pieces adds to, and :func:`group_lag`, pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from rolloutfleet.transport.redis.stream_status import StreamStatus


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


def group_lag(statuses: Sequence[StreamStatus], group: str, policy_lag: int | None) -> ConsumerLag:
    """Group ``group``'s lag summed over a job's batch streams (``statuses``, one per shard):
    pending entries, undelivered ones (None if unknown on any stream), the oldest pending age."""
    pending, undelivered, ages = 0, cast(int | None, 0), []
    for status in statuses:
        found = next((g for g in status.groups if g.name == group), None)
        if found is None:
            undelivered = None if undelivered is None else undelivered + status.length
            continue
        pending += found.pending
        undelivered = None if undelivered is None or found.undelivered is None else undelivered + found.undelivered
        ages += [] if found.oldest_pending_age_s is None else [found.oldest_pending_age_s]
    return ConsumerLag(pending, undelivered, max(ages) if ages else None, policy_lag)

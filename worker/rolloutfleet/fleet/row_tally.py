"""Where every row a worker sampled went: published, or dropped (the fragment in hand when
the worker had to stop and could not publish it). Pure.

At any moment ``sampled == published + dropped + the rows in hand``; once a worker has
stopped there are none in hand. The counts go into its heartbeat (``rows_sampled``,
``rows_published``, ``rows_dropped``: the last one it writes, as it stops, stays in Redis
after its pod is gone), its metrics and its last log line, so that what a preemption or a
drain cost is counted, never guessed::

    tally = RowTally()
    tally.sampled_fragment(batch); ...; tally.published_fragment(batch)  # or dropped_fragment
"""

from __future__ import annotations

from dataclasses import dataclass

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.multiagent_batch import MultiAgentBatch


def rows_of(batch: SampleBatch | MultiAgentBatch) -> int:
    """The rows a fragment holds (a multi-agent one: over all its policies)."""
    if isinstance(batch, MultiAgentBatch):
        return sum(len(part) for part in batch.values())
    return len(batch)


@dataclass
class RowTally:
    """Rows of one worker process since it started."""

    sampled: int = 0
    published: int = 0
    dropped: int = 0

    def sampled_fragment(self, batch: SampleBatch | MultiAgentBatch) -> None:
        self.sampled += rows_of(batch)

    def published_fragment(self, batch: SampleBatch | MultiAgentBatch) -> None:
        self.published += rows_of(batch)

    def dropped_fragment(self, batch: SampleBatch | MultiAgentBatch) -> int:
        """Count ``batch`` as dropped; its rows."""
        rows = rows_of(batch)
        self.dropped += rows
        return rows

    def fields(self) -> dict[str, int]:
        """The heartbeat's fields.

        >>> RowTally(sampled=30, published=20, dropped=10).fields()
        {'rows_sampled': 30, 'rows_published': 20, 'rows_dropped': 10}
        """
        return {"rows_sampled": self.sampled, "rows_published": self.published, "rows_dropped": self.dropped}

    def describe(self) -> str:
        """The last log line's words.

        >>> RowTally(sampled=30, published=20, dropped=10).describe()
        '30 rows sampled: 20 published, 10 dropped'
        """
        return f"{self.sampled} rows sampled: {self.published} published, {self.dropped} dropped"

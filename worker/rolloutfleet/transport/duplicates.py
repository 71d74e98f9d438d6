"""Second copies of a batch: a publisher that lost the reply to its XADD sends the batch
again with the same identity (``producer``, ``seq``: :mod:`rolloutfleet.transport.batch_entry`),
and whoever reads the stream drops the copy it has seen."""

from __future__ import annotations

from collections import OrderedDict

from rolloutfleet.transport.entries import BatchMetadata

SEEN_CAPACITY = 1 << 16
"""How many batch identities are remembered; a re-send follows its first copy within seconds."""


class SeenBatches:
    """The identities of the batches read lately, the oldest forgotten first.

    >>> seen = SeenBatches()
    >>> batch = BatchMetadata(worker_index=0, weights_seq_no=1, env_steps=8, created_at=0.0, producer="w0", seq=7)
    >>> seen.first_copy(batch), seen.first_copy(batch)
    (True, False)
    """

    def __init__(self, capacity: int = SEEN_CAPACITY) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()

    def first_copy(self, metadata: BatchMetadata) -> bool:
        """Whether this is the first copy of the batch read (remembered from now on); a batch
        without a producer has no identity and always is."""
        if not metadata.producer:
            return True
        key = (metadata.producer, metadata.seq)
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return True

    def forget(self, metadata: BatchMetadata) -> None:
        """Take the batch back: its next copy is read as a first one."""
        self._seen.pop((metadata.producer, metadata.seq), None)

"""Second copies of a batch (same producer and seq) are told from first ones."""

from __future__ import annotations

from rolloutfleet.transport.duplicates import SeenBatches
from rolloutfleet.transport.entries import BatchMetadata


def meta(producer: str, seq: int) -> BatchMetadata:
    return BatchMetadata(worker_index=0, weights_seq_no=1, env_steps=4, created_at=0.0, producer=producer, seq=seq)


def test_a_re_sent_batch_is_a_second_copy_and_another_producer_s_is_not() -> None:
    seen = SeenBatches()
    assert seen.first_copy(meta("w0", 1))
    assert not seen.first_copy(meta("w0", 1))
    assert seen.first_copy(meta("w1", 1))  # the same seq of another worker is another batch
    assert seen.first_copy(meta("w0", 2))


def test_a_batch_without_a_producer_has_no_identity_and_is_never_dropped() -> None:
    seen = SeenBatches()
    assert seen.first_copy(meta("", -1)) and seen.first_copy(meta("", -1))


def test_the_oldest_identity_is_forgotten_past_the_capacity() -> None:
    seen = SeenBatches(capacity=2)
    for seq in range(3):
        assert seen.first_copy(meta("w0", seq))
    assert seen.first_copy(meta("w0", 0))  # forgotten: read as a first copy again
    assert not seen.first_copy(meta("w0", 2))


def test_a_forgotten_batch_is_read_as_a_first_copy_again() -> None:
    seen = SeenBatches()
    seen.first_copy(meta("w0", 5))
    seen.forget(meta("w0", 5))
    assert seen.first_copy(meta("w0", 5))

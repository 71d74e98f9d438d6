"""The consumer's pure parts: judging rows by their weights version, reading metadata."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.codec import DecodeError
from rolloutfleet.transport.entries import (
    BatchMetadata,
    Message,
    fresh_rows,
    majority_schema,
    schema_mismatch,
    schema_of,
)


def metadata(newest: int, oldest: int | None = None) -> BatchMetadata:
    return BatchMetadata(worker_index=0, weights_seq_no=newest, env_steps=0, created_at=0.0, weights_seq_no_min=oldest)


def test_a_mixed_batch_keeps_exactly_its_recent_rows() -> None:
    # A fragment sampled with v7 that still holds rows carried over from v3, interleaved
    # as the grid gathers them. Learner at v7 with max_policy_lag=2: v5 and newer pass.
    versions = np.array([3, 7, 7, 3, 7, 3, 7, 7], np.int64)
    batch = SampleBatch({"value": np.arange(8), "obs": np.arange(16.0).reshape(8, 2), "weights_seq_no": versions})
    kept, dropped = fresh_rows(batch, metadata(7, 3), oldest_allowed=7 - 2)
    assert dropped == 3
    assert kept["value"].tolist() == [1, 2, 4, 6, 7]
    assert kept["weights_seq_no"].tolist() == [7] * 5
    np.testing.assert_array_equal(kept["obs"], batch["obs"][[1, 2, 4, 6, 7]])  # rows stay whole


def test_the_newest_rows_do_not_vouch_for_the_old_ones() -> None:
    # The metadata's newest version (7) is within the lag; the v3 rows are still judged.
    batch = SampleBatch({"weights_seq_no": np.array([3, 7])})
    assert metadata(7, 3).weights_seq_no >= 5
    kept, dropped = fresh_rows(batch, metadata(7, 3), oldest_allowed=5)
    assert (len(kept), dropped) == (1, 1)


def test_all_recent_is_the_batch_itself_and_all_stale_is_empty() -> None:
    batch = SampleBatch({"weights_seq_no": np.array([7, 7, 8], np.int32)})
    kept, dropped = fresh_rows(batch, metadata(8, 7), oldest_allowed=7)
    assert kept is batch and dropped == 0  # nothing copied in the common case
    kept, dropped = fresh_rows(batch, metadata(8, 7), oldest_allowed=9)
    assert (len(kept), dropped) == (0, 3) and list(kept) == ["weights_seq_no"]


def test_a_batch_without_the_column_has_its_metadata_version() -> None:
    batch = SampleBatch({"value": np.arange(4)})
    assert fresh_rows(batch, metadata(5), oldest_allowed=5) == (batch, 0)
    kept, dropped = fresh_rows(batch, metadata(4), oldest_allowed=5)
    assert (len(kept), dropped) == (0, 4)


@pytest.mark.parametrize("column", [np.array([1.0, 2.0]), np.array([[1, 1], [2, 2]]), np.array([True, False])], ids=str)
def test_a_version_column_that_is_not_one_integer_per_row_is_named(column: np.ndarray) -> None:
    batch = SampleBatch({"weights_seq_no": column})
    with pytest.raises(DecodeError, match="column 'weights_seq_no' must be one integer per row"):
        fresh_rows(batch, metadata(2), oldest_allowed=0)


def fields(**extra: bytes) -> dict[bytes, bytes]:
    base = {b"worker_index": b"1", b"weights_seq_no": b"7", b"env_steps": b"4", b"created_at": b"1.5"}
    return {**base, **{k.encode(): v for k, v in extra.items()}}


def test_metadata_reads_the_oldest_version_and_entries_written_before_it_existed() -> None:
    assert BatchMetadata.from_fields(fields(weights_seq_no_min=b"3")).weights_seq_no_min == 3
    # A publisher older than the field wrote one version per batch: it is the oldest too.
    old = BatchMetadata.from_fields(fields())
    assert (old.weights_seq_no, old.weights_seq_no_min) == (7, 7)
    with pytest.raises(DecodeError, match="field 'weights_seq_no_min' is not a number"):
        BatchMetadata.from_fields(fields(weights_seq_no_min=b"three"))


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"env_steps": b"-5"}, "field 'env_steps' must be within 0 and 2**63 - 1, got -5"),
        ({"weights_seq_no": b"1" + b"0" * 30}, "field 'weights_seq_no' must be within 0 and 2**63 - 1"),
        ({"worker_index": b"-1"}, "field 'worker_index' must be within 0"),
        ({"weights_seq_no_min": b"9"}, "field 'weights_seq_no_min' (9) is above 'weights_seq_no' (7)"),
        ({"created_at": b"nan"}, "field 'created_at' must be a finite unix time"),
        ({"created_at": b"inf"}, "field 'created_at' must be a finite unix time"),
    ],
)
def test_impossible_metadata_is_a_decode_error_naming_the_field(extra: dict[str, bytes], named: str) -> None:
    with pytest.raises(DecodeError) as refused:
        BatchMetadata.from_fields(fields(**extra))
    assert named in str(refused.value)


def test_the_largest_possible_version_is_still_one() -> None:
    top = str(2**63 - 1).encode()
    assert BatchMetadata.from_fields(fields(weights_seq_no=top, weights_seq_no_min=top)).weights_seq_no == 2**63 - 1


def test_a_batch_joins_others_of_its_columns_dtypes_and_row_shapes() -> None:
    reference = schema_of({"obs": np.zeros((4, 3), np.float32), "agent_id": np.array(["a", "b", "c", "d"])})
    same = {"obs": np.ones((9, 3), np.float32), "agent_id": np.array(["longer-id"] * 9)}  # text width is free
    assert schema_mismatch(same, reference) is None
    assert "missing ['agent_id']" in str(schema_mismatch({"obs": np.ones((2, 3), np.float32)}, reference))
    assert "is float64, the batch's is float32" in str(
        schema_mismatch({"obs": np.ones((2, 3)), "agent_id": np.array(["a", "b"])}, reference)
    )
    assert "shape (2,), the batch's have (3,)" in str(
        schema_mismatch({"obs": np.ones((2, 2), np.float32), "agent_id": np.array(["a", "b"])}, reference)
    )


def test_the_majority_schema_wins_and_ties_go_to_the_earliest() -> None:
    def message(width: int) -> Message:
        columns = {"obs": np.zeros((1, width), np.float32)}
        return Message(str(width), SampleBatch(columns), BatchMetadata(0, 0, 1, 0.0), None)

    assert majority_schema([message(5), message(2), message(2)]) == (("obs", "float32", (2,)),)
    assert majority_schema([message(5), message(2)]) == (("obs", "float32", (5,)),)

"""The publisher's pure part: the weights versions it writes beside a batch come from the batch."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.transport.publisher import weights_versions


def test_versions_are_the_columns_oldest_and_newest() -> None:
    assert weights_versions(SampleBatch({"weights_seq_no": np.array([7, 3, 7, 7])})) == (3, 7)
    assert weights_versions({"weights_seq_no": np.array([4], np.uint32)}) == (4, 4)


def test_a_batch_without_the_column_has_the_version_it_is_given() -> None:
    assert weights_versions({"obs": np.zeros(3)}) == (0, 0)
    assert weights_versions({"obs": np.zeros(3)}, 5) == (5, 5)
    assert weights_versions({"weights_seq_no": np.zeros(0, np.int64)}, 2) == (2, 2)


def test_a_version_beside_the_column_must_agree_with_every_row() -> None:
    assert weights_versions({"weights_seq_no": np.array([4, 4])}, 4) == (4, 4)
    with pytest.raises(ValueError, match=r"weights_seq_no=7 passed .* holds versions 3\.\.7"):
        weights_versions({"weights_seq_no": np.array([3, 7])}, 7)


def test_a_column_that_is_not_one_integer_per_row_is_named() -> None:
    with pytest.raises(ValueError, match="column 'weights_seq_no' must be one integer per row, got float32"):
        weights_versions({"weights_seq_no": np.zeros(2, np.float32)})

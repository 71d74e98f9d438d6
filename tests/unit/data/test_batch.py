from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch


def test_mapping_of_equal_length_columns() -> None:
    batch = SampleBatch({"obs": np.zeros((3, 2)), "eps_id": np.array([1, 1, 2])})
    assert len(batch) == 3
    assert list(batch) == ["obs", "eps_id"]
    assert batch["obs"].shape == (3, 2)
    assert dict(batch)["eps_id"].tolist() == [1, 1, 2]
    with pytest.raises(ValueError, match="'eps_id' has 2 rows, expected 3"):
        SampleBatch({"obs": np.zeros(3), "eps_id": np.zeros(2)})
    with pytest.raises(ValueError, match="scalar"):
        SampleBatch({"obs": np.float32(1)})


def test_concat_and_split_by_episode() -> None:
    a = SampleBatch({"eps_id": np.array([7, 7, 8]), "t": np.array([0, 1, 0])})
    b = SampleBatch({"t": np.array([1]), "eps_id": np.array([8])})
    both = SampleBatch.concat([a, b])
    assert both["eps_id"].tolist() == [7, 7, 8, 8]
    assert both["t"].tolist() == [0, 1, 0, 1]
    assert [len(c) for c in both.split_by_episode()] == [2, 2]
    with pytest.raises(ValueError, match="columns"):
        SampleBatch.concat([a, SampleBatch({"eps_id": np.array([1])})])
    assert len(SampleBatch.concat([])) == 0

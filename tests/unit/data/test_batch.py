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


def test_nonfinite_rows_counts_rows_not_values() -> None:
    from rolloutfleet.data.batch import nonfinite_rows

    obs = np.zeros((5, 2, 3), np.float32)
    obs[1, 0, 0] = obs[1, 1, 2] = np.nan  # two bad values, one row
    new_obs = np.zeros((5, 2, 3), np.float32)
    new_obs[1] = np.inf  # the same row again
    new_obs[4, 1, 1] = -np.inf
    rewards = np.array([0.0, np.inf, np.nan, 1.0, 2.0])
    assert nonfinite_rows(SampleBatch({"obs": obs, "new_obs": new_obs, "rewards": rewards})) == (2, 2)
    # Integer observations (Discrete spaces) are always finite.
    ints = SampleBatch({"obs": np.arange(3), "new_obs": np.arange(3), "rewards": np.ones(3)})
    assert nonfinite_rows(ints) == (0, 0)
    # A policy that acted in no row of a fragment (a league slot not played): nothing to count.
    empty = SampleBatch({"obs": np.zeros((0, 2, 3), np.float32), "rewards": np.zeros(0, np.float32)})
    assert nonfinite_rows(empty) == (0, 0)


def test_nonfinite_leaf_columns_of_dict_observations_count() -> None:
    from rolloutfleet.data.batch import nonfinite_rows

    batch = {
        "obs/pos": np.array([[0.0], [np.nan], [1.0]], np.float32),
        "new_obs/pos": np.array([[0.0], [0.0], [np.inf]], np.float32),
        "obs/action_mask": np.ones((3, 2), np.int8),
        "rewards": np.zeros(3, np.float32),
    }
    assert nonfinite_rows(batch) == (2, 0)

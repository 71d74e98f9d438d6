"""``max_policy_lag`` row by row, and the published version going back."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.transport.consuming.policy_lag import PolicyLag
from rolloutfleet.transport.consuming.stats import ConsumerStats
from rolloutfleet.transport.entries import BatchMetadata


def batch(*versions: int) -> tuple[SampleBatch, BatchMetadata]:
    rows = SampleBatch({"value": np.arange(len(versions)), "weights_seq_no": np.array(versions, np.int64)})
    meta = BatchMetadata(0, max(versions), len(versions), 0.0, weights_seq_no_min=min(versions))
    return rows, meta


def test_without_a_lag_every_row_passes_and_nothing_is_read() -> None:
    lag = PolicyLag(None, ConsumerStats())
    assert lag.newest(lambda: pytest.fail("read"), "key") is None
    rows, meta = batch(1, 9)
    kept = lag.fresh(rows, meta, None)
    assert kept is not None and kept[0]["value"].tolist() == [0, 1] and kept[1] == 1


def test_stale_rows_are_cut_and_the_oldest_kept_version_reported() -> None:
    stats = ConsumerStats()
    lag = PolicyLag(2, stats)
    rows, meta = batch(3, 7, 5, 4)
    kept = lag.fresh(rows, meta, newest=7)  # v5 and newer pass
    assert kept is not None
    assert kept[0]["value"].tolist() == [1, 2] and kept[1] == 5
    assert (stats.stale_rows, stats.stale) == (2, 0)


def test_a_batch_with_no_recent_row_is_dropped_whole() -> None:
    stats = ConsumerStats()
    rows, meta = batch(1, 2)
    assert PolicyLag(0, stats).fresh(rows, meta, newest=5) is None
    assert (stats.stale_rows, stats.stale) == (2, 1)


def test_the_learner_s_version_wins_over_the_published_one() -> None:
    lag = PolicyLag(1, ConsumerStats())
    lag.policy_version = 4
    assert lag.newest(lambda: 10, "key") == 4


def test_a_published_version_that_goes_back_is_counted_once_per_fall(caplog: pytest.LogCaptureFixture) -> None:
    stats = ConsumerStats()
    lag = PolicyLag(1, stats)
    with caplog.at_level(logging.WARNING):
        assert [lag.newest(lambda v=v: v, "job:weights") for v in (5, 6, 2, 3)] == [5, 6, 2, 3]  # type: ignore[misc]
    assert stats.weights_resets == 1
    assert "went back from 6 to 2" in caplog.text


def test_the_lag_is_the_newest_version_minus_the_oldest_row_delivered() -> None:
    lag = PolicyLag(None, ConsumerStats())
    assert lag.lag(9) is None  # nothing delivered yet
    lag.delivered([7, 5, 6])
    lag.delivered([])  # an empty read changes nothing
    assert (lag.lag(9), lag.lag(None)) == (4, None)

"""Running statistics against numpy's own mean/var over the same data."""

from __future__ import annotations

import numpy as np

from rolloutfleet.data.filters import MeanStdFilter, RunningStat


def test_running_stat_equals_numpy_in_any_split() -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, (1000, 3))
    stat = RunningStat((3,))
    for chunk in np.array_split(data, [1, 7, 300, 301, 999]):
        stat.push_batch(chunk)
    np.testing.assert_allclose(stat.mean, data.mean(axis=0))
    np.testing.assert_allclose(stat.var, data.var(axis=0, ddof=1))
    left, right = RunningStat((3,)), RunningStat((3,))
    left.push_batch(data[:400])
    right.push_batch(data[400:])
    left.merge(right)
    np.testing.assert_allclose(left.var, data.var(axis=0, ddof=1))


def test_filter_converges_to_unit_normal() -> None:
    rng = np.random.default_rng(1)
    f = MeanStdFilter((2,))
    for _ in range(200):
        out = f(rng.normal([5.0, -3.0], [2.0, 0.5], (32, 2)).astype(np.float32))
    sample = f(rng.normal([5.0, -3.0], [2.0, 0.5], (5000, 2)).astype(np.float32), update=False)
    np.testing.assert_allclose(sample.mean(axis=0), 0, atol=0.05)
    np.testing.assert_allclose(sample.std(axis=0), 1, atol=0.05)
    assert out.dtype == np.float32


def test_sync_keeps_the_unflushed_buffer_and_state_round_trips() -> None:
    worker, central = MeanStdFilter((1,)), MeanStdFilter((1,))
    worker(np.array([[1.0], [3.0]], np.float32))
    central.apply_changes(worker.copy())
    worker.flush()
    worker(np.array([[10.0]], np.float32))  # seen after the flush, before the sync
    worker.sync(central)
    assert worker.stats.count == 3
    np.testing.assert_allclose(worker.stats.mean, [14 / 3])
    clone = MeanStdFilter((1,))
    clone.set_state(worker.get_state())
    assert clone.stats.count == 3
    assert clone.buffer.count == 1


def test_non_finite_observations_stay_out_of_the_statistics() -> None:
    rng = np.random.default_rng(3)
    clean = rng.normal(2.0, 1.5, (64, 3))
    poisoned = clean.copy()
    poisoned[5, 1] = np.nan
    poisoned[9, 0] = np.inf
    poisoned[40, 2] = -np.inf
    f = MeanStdFilter((3,))
    out = f(poisoned)
    kept = np.delete(clean, [5, 9, 40], axis=0)
    assert f.stats.count == f.buffer.count == len(kept)
    np.testing.assert_allclose(f.stats.mean, kept.mean(axis=0))
    np.testing.assert_allclose(f.stats.var, kept.var(axis=0, ddof=1))
    assert f.quarantined == 3
    # The good rows are normalized with clean statistics; the bad row stays visibly bad.
    assert np.isfinite(np.delete(out, 5, axis=0)).all()
    assert np.isnan(out[5, 1])
    assert f.stats.is_finite()


def test_a_single_non_finite_observation_of_a_multi_dim_space_is_counted_once() -> None:
    f = MeanStdFilter((2, 2))
    obs = np.ones((3, 2, 2))
    obs[1, 0, 1] = np.nan
    obs[1, 1, 1] = np.nan
    f(obs)
    assert f.quarantined == 1 and f.stats.count == 2


def test_non_finite_statistics_are_detected() -> None:
    good = RunningStat((2,), 4.0, np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    assert good.is_finite()
    assert not RunningStat((2,), 4.0, np.array([np.nan, 2.0]), np.array([3.0, 4.0])).is_finite()
    assert not RunningStat((2,), 4.0, np.array([1.0, 2.0]), np.array([np.inf, 4.0])).is_finite()
    assert not RunningStat((2,), float("nan"), np.array([1.0, 2.0]), np.array([3.0, 4.0])).is_finite()
    assert not RunningStat((2,), -1.0, np.array([1.0, 2.0]), np.array([3.0, 4.0])).is_finite()

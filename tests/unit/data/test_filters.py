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

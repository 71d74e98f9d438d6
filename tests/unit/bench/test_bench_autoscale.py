"""bench.bench_autoscale's permutation test, against splits counted by hand."""

from __future__ import annotations

import pytest

from bench.bench_autoscale import more_starved


def test_one_run_above_both_of_the_others_is_one_split_in_three() -> None:
    # Pooled 3, 1, 2 split 1 + 2: {3} gives 3 - 1.5, {1} gives 1 - 2.5, {2} gives 2 - 2.
    assert more_starved([3.0], [1.0, 2.0]) == pytest.approx(1 / 3)


def test_a_run_below_the_others_is_matched_by_every_split() -> None:
    assert more_starved([1.0], [2.0, 3.0]) == 1.0


def test_groups_far_apart_are_rare_splits() -> None:
    # 5 + 5 runs: 252 splits. Medians 4 apart (7 and 3) need 7, 8, 9 and two of 4, 4.5, 5, 6
    # on one side, 1, 2, 3 on the other: C(4, 2) = 6 splits.
    assert more_starved([5.0, 6.0, 7.0, 8.0, 9.0], [1.0, 2.0, 3.0, 4.0, 4.5]) == pytest.approx(6 / 252)

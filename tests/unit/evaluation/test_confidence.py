"""The 95 % interval against values from published t tables and a hand computation."""

from __future__ import annotations

import math

import pytest

from rolloutfleet.evaluation.confidence import VersionSummary, summarize, t_critical

# t_{0.975, df} as the standard tables give them (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2).
PUBLISHED = {1: 12.706, 2: 4.303, 5: 2.571, 9: 2.262, 19: 2.093, 29: 2.045,
             35: 2.030, 50: 2.009, 100: 1.984, 200: 1.972, 1000: 1.962}  # fmt: skip


@pytest.mark.parametrize(("df", "value"), sorted(PUBLISHED.items()))
def test_t_critical_matches_the_published_table(df: int, value: float) -> None:
    assert t_critical(df) == pytest.approx(value, abs=1e-3)


def test_t_critical_refuses_no_degrees_of_freedom() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_critical(0)


def test_four_episodes_by_hand() -> None:
    # returns 2, 4, 4, 6: mean 4, sample variance (4+0+0+4)/3 = 8/3, standard error sqrt(8/3/4),
    # half width t_{0.975,3} = 3.182 times that = 2.5982.
    summary = summarize(3, [(2.0, 2), (4.0, 4), (4.0, 5), (6.0, 9)])
    assert (summary.version, summary.episodes, summary.return_mean, summary.length_mean) == (3, 4, 4.0, 5.0)
    assert summary.return_half_width == pytest.approx(3.182 * math.sqrt(8 / 3 / 4), rel=1e-9)
    assert summary.return_low == pytest.approx(4.0 - 2.598, abs=1e-3)
    assert summary.return_high == pytest.approx(4.0 + 2.598, abs=1e-3)


def test_equal_returns_have_no_spread_and_one_episode_no_interval() -> None:
    assert summarize(1, [(500.0, 500)] * 10).return_half_width == 0.0
    one = summarize(1, [(9.0, 9)])
    assert math.isnan(one.return_half_width)
    assert one.to_json()["return_half_width"] is None
    assert "±" not in one.describe() and "1 episode)" in one.describe()


def test_the_json_form_round_trips() -> None:
    summary = summarize(12, [(1.0, 3), (2.5, 4), (7.0, 8)])
    assert VersionSummary.from_json(summary.to_json()) == summary
    assert math.isnan(VersionSummary.from_json(summarize(1, [(1.0, 1)]).to_json()).return_half_width)


def test_nothing_to_summarize_is_refused() -> None:
    with pytest.raises(ValueError, match="no episodes"):
        summarize(1, [])

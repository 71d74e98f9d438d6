"""Matchmaking: who plays whom, drawn as each strategy's weights say (counted over many
draws with a fixed generator), and main in every seat."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from rolloutfleet.league.matchmaking import League, PrioritizedFictitiousSelfPlay, Record, Uniform

SEATS = ("first", "second")


def draws(strategy: Uniform | PrioritizedFictitiousSelfPlay, league: League, n: int = 20_000) -> Counter[str]:
    rng = np.random.default_rng(7)
    picked: Counter[str] = Counter()
    for _ in range(n):
        match = strategy.match(league, SEATS, rng)
        assert sorted(match.seats) == sorted(SEATS)
        assert list(match.seats.values()).count("main") == 1
        picked.update(match.opponents("main"))
    return picked


def within(count: int, n: int, p: float) -> bool:
    """``count`` of ``n`` draws is within 4 standard deviations of a probability ``p``."""
    return abs(count - n * p) <= 4 * (n * p * (1 - p)) ** 0.5


def test_record_win_rate_has_a_prior_of_one_win_and_one_loss() -> None:
    assert Record().win_rate() == 0.5
    assert Record(wins=8, losses=0).win_rate() == 9 / 10
    assert Record(draws=2).win_rate() == 0.5
    assert Record().add(1).add(0.5).add(0) == Record(1, 1, 1)


def test_uniform_picks_every_snapshot_alike() -> None:
    league = League("main", ("v1", "v2", "v3", "v4"), {"v1": Record(wins=50)})
    picked = draws(Uniform(), league)
    assert all(within(picked[name], 20_000, 0.25) for name in league.snapshots), picked


def test_pfsp_hard_prefers_the_opponents_main_loses_to() -> None:
    # main lost 10 of 10 to v1 (p = 1/12) and won 10 of 10 against v2 (p = 11/12):
    # weights (11/12)^2 : (1/12)^2 = 121 : 1; v3 is new (p = 1/2): (1/2)^2.
    stats = {"v1": Record(losses=10), "v2": Record(wins=10)}
    league = League("main", ("v1", "v2", "v3"), stats)
    strategy = PrioritizedFictitiousSelfPlay()
    raw = np.array([(11 / 12) ** 2, (1 / 12) ** 2, 0.25])
    expected = raw / raw.sum()
    assert np.allclose(strategy.weights(league), expected)
    picked = draws(strategy, league)
    assert all(within(picked[name], 20_000, p) for name, p in zip(league.snapshots, expected, strict=True)), picked


def test_pfsp_variance_prefers_opponents_of_mains_strength() -> None:
    stats = {"easy": Record(wins=30), "even": Record(wins=15, losses=15), "hard": Record(losses=30)}
    weights = PrioritizedFictitiousSelfPlay("variance").weights(League("main", ("easy", "even", "hard"), stats))
    assert weights.argmax() == 1 and np.isclose(weights[0], weights[2])


def test_main_takes_every_seat_alike() -> None:
    rng = np.random.default_rng(3)
    league = League("main", ("v1",))
    seats = Counter(next(s for s, p in Uniform().match(league, SEATS, rng).seats.items() if p == "main")
                    for _ in range(10_000))  # fmt: skip
    assert within(seats["first"], 10_000, 0.5), seats


def test_no_snapshot_yet_main_plays_itself_and_more_seats_get_opponents() -> None:
    rng = np.random.default_rng(0)
    assert dict(Uniform().match(League("main", ()), SEATS, rng).seats) == {"first": "main", "second": "main"}
    four = Uniform().match(League("main", ("v1",)), ("a", "b", "c", "d"), rng)
    assert sorted(four.seats.values()) == ["main", "v1", "v1", "v1"]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="weighting must be"):
        PrioritizedFictitiousSelfPlay("soft")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="power must be > 0"):
        PrioritizedFictitiousSelfPlay(power=0)
    with pytest.raises(ValueError, match="at least 2 seats"):
        Uniform().match(League("main", ("v1",)), ("only",), np.random.default_rng(0))

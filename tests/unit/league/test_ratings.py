"""Elo as the rating system defines it: the expected score from the rating gap, a move of
k x (score - expected), and what a table of results gives."""

from __future__ import annotations

import math

import pytest

from rolloutfleet.league.ratings import Elo, expected_score, pair_score


def test_expected_score_is_elos_logistic_curve() -> None:
    assert expected_score(1000, 1000) == 0.5
    # 400 points ahead: odds of 10 to 1 (Elo's definition of the scale).
    assert math.isclose(expected_score(1400, 1000), 10 / 11)
    assert math.isclose(expected_score(1000, 1400), 1 / 11)
    assert math.isclose(expected_score(1200, 1000) + expected_score(1000, 1200), 1.0)


def test_a_win_between_equals_moves_each_by_half_of_k() -> None:
    table = Elo(k=32)
    table.record({"a": 1.0, "b": 0.0})
    assert table.rating("a") == 1016 and table.rating("b") == 984
    assert (table.games["a"], table.wins["a"], table.losses["b"]) == (1, 1, 1)


def test_a_draw_between_equals_changes_nothing_and_counts_as_a_draw() -> None:
    table = Elo()
    table.record({"a": 0.0, "b": 0.0})
    assert table.rating("a") == table.rating("b") == 1000
    assert table.draws["a"] == table.draws["b"] == 1


def test_an_upset_moves_more_than_an_expected_win() -> None:
    table = Elo(k=32, ratings={"strong": 1400.0, "weak": 1000.0})
    table.record({"strong": 0.0, "weak": 1.0})
    assert math.isclose(table.rating("weak"), 1000 + 32 * (1 - 1 / 11))
    expected = Elo(k=32, ratings={"strong": 1400.0, "weak": 1000.0})
    expected.record({"strong": 1.0, "weak": 0.0})
    assert 1400 - table.rating("strong") > expected.rating("strong") - 1400


def test_ratings_are_zero_sum_and_order_follows_results() -> None:
    table = Elo()
    games = [{"a": 1, "b": 0}, {"a": 1, "c": 0}, {"b": 1, "c": 0}, {"a": 0.5, "b": 0.5}, {"a": 1, "c": -1}]
    table.record_all(games)
    assert math.isclose(sum(table.ratings.values()), 3 * 1000)
    assert [row[0] for row in table.table()] == ["a", "b", "c"]
    assert table.table(top=1)[0][2:] == (4, 3, 1, 0)  # a: 4 games, 3 wins, 1 draw, 0 losses


def test_three_seats_count_as_three_pairs_with_k_shared() -> None:
    table = Elo(k=30)
    table.record({"a": 3.0, "b": 2.0, "c": 1.0})
    # Each has 2 opponents: k/2 a pair, every pair between equals worth 0.5 x k/2.
    assert [round(table.rating(p), 6) for p in "abc"] == [1015.0, 1000.0, 985.0]
    assert table.wins["a"] == 1 and table.losses["b"] == table.losses["c"] == 1


def test_one_policy_alone_is_no_match() -> None:
    table = Elo()
    table.record({"main": 1.0})
    assert table.ratings == {}


def test_pair_score_and_k_checked() -> None:
    assert (pair_score(1, 0), pair_score(0, 0), pair_score(-1, 0)) == (1.0, 0.5, 0.0)
    with pytest.raises(ValueError, match="k must be > 0"):
        Elo(k=0)

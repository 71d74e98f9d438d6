"""The league's standings: Elo's own arithmetic decides the order, the JSON the learner
writes reads back the same, and the status the operator shows says where main stands."""

from __future__ import annotations

import pytest

from rolloutfleet.league.ratings import Elo, expected_score
from rolloutfleet.league.standings import Standings, standings_of


def played() -> Elo:
    elo = Elo(k=32)
    for _ in range(3):
        elo.record({"main": 1.0, "v1": -1.0})  # main beats v1 three times
    elo.record({"v2": 1.0, "main": -1.0})  # and loses once to v2
    elo.record({"v1": 0.0, "v2": 0.0})
    return elo


def test_the_order_and_main_rating_are_elos() -> None:
    elo = played()
    standings = standings_of(elo, "main", snapshots=2, matches=5, top=2, at=1_800_000_000.0)
    assert [row[0] for row in standings.top] == [row[0] for row in elo.table(top=2)]
    assert standings.main_rating == elo.rating("main") and standings.policies == 3
    # By hand: main's first game against v1 moves it K * (1 - 1/2) = 16 up.
    first = Elo(k=32)
    first.record({"main": 1.0, "v1": -1.0})
    assert first.rating("main") == 1000 + 32 * (1 - expected_score(1000, 1000)) == 1016
    assert standings.main_rank == 1 + [row[0] for row in elo.table()].index("main")


def test_the_json_reads_back_and_the_status_says_where_main_stands() -> None:
    standings = standings_of(played(), "main", snapshots=2, matches=5, at=1_800_000_000.0)
    again = Standings.from_json(standings.to_json())
    assert again == standings
    status = again.status()
    assert status["updatedAt"] == "2027-01-15T08:00:00Z" and status["matches"] == 5
    assert [row["policy"] for row in status["top"]] == [row[0] for row in standings.top]
    rank = {1: "1st", 2: "2nd", 3: "3rd"}[standings.main_rank or 0]
    assert status["message"].startswith(f"main {standings.main_rating:.0f} ({rank} of 3)")
    assert status["message"].endswith("; 2 snapshots, 5 matches")


def test_main_without_a_game_and_a_value_that_is_not_standings() -> None:
    elo = Elo()
    elo.record({"v1": 1.0, "v2": -1.0})
    status = standings_of(elo, "main", snapshots=1, matches=1, at=0.0).status()
    assert status["mainRating"] is None and status["message"] == "main has no rated game yet; 1 snapshot, 1 match"
    with pytest.raises(KeyError):
        Standings.from_json('{"main": "main"}')
    with pytest.raises(ValueError, match="Expecting value"):
        Standings.from_json("not json")

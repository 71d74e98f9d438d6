"""The league learner's pure parts, checked against what is known outside them: Elo's own
definition (a win between equals moves each rating by K/2 = 16), main's record counted by
hand from the games, the matchmakers' weights from that record, and the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rolloutfleet import RolloutJob
from rolloutfleet.examples.league_play import (
    FIRST,
    MATCHMAKERS,
    ResultsBook,
    parse_args,
    snapshot_name,
    table_lines,
    verdict,
)
from rolloutfleet.league.matchmaking import League, PrioritizedFictitiousSelfPlay, Record, Uniform
from rolloutfleet.league.records import MatchResult

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = str(ROOT / "examples" / "tictactoe-league.yaml")


def game(first: str, second: str, winner: str | None) -> MatchResult:
    """A finished tic-tac-toe game: +1/-1 for a win, 0/0 for a draw."""
    value = {first: 0.0, second: 0.0} if winner is None else {first: -1.0, second: -1.0} | {winner: 1.0}
    return MatchResult({"player_1": first, "player_2": second}, {"player_1": value[first], "player_2": value[second]})


def test_the_example_manifest_has_a_league_of_main_v1_with_a_slot_per_game() -> None:
    job = RolloutJob.from_file(MANIFEST)
    league, multi = job.spec.league, job.spec.multi_agent
    assert league is not None and multi is not None
    assert league.opponent == "main_v1" and league.cached_policies == job.spec.env.num_envs == 16
    assert league.plan_refresh_seconds == 5
    assert sorted(multi.policies) == ["main", "main_v1"] and multi.trained_policies == ["main"]


def test_defaults_and_choices_of_the_command_line() -> None:
    args = parse_args([MANIFEST])
    assert (args.matchmaker, args.min_margin, args.env_steps, args.time_limit) == ("pfsp", 200.0, 0, 600.0)
    assert args.snapshot_every == 10 and args.save is None
    assert parse_args([MANIFEST, "--matchmaker", "uniform", "--env-steps", "5000"]).env_steps == 5000
    assert set(MATCHMAKERS) == {"pfsp", "uniform"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--matchmaker", "elo"], "invalid choice: 'elo'"),
        (["--snapshot-every", "0"], "--snapshot-every must be >= 1, got 0"),
        (["--plan-every", "-1"], "--plan-every must be >= 1, got -1"),
    ],
)
def test_a_bad_option_is_named_and_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args([MANIFEST, *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_snapshot_names_sort_as_their_updates() -> None:
    updates = [0, 5, 10, 90, 100, 1000, 12345]
    names = [snapshot_name(u) for u in updates]
    assert names[0] == FIRST == "main-00000"
    assert sorted(names) == names and len(set(names)) == len(names)
    assert sorted(reversed(names)) == names


def test_the_book_counts_mains_record_and_rates_as_elo_defines() -> None:
    book = ResultsBook()
    games = [
        game("main", FIRST, "main"),
        game(FIRST, "main", "main"),
        game("main", FIRST, None),
        game(FIRST, "main", FIRST),
        game("main", "main-00010", "main-00010"),
        game("main_v1", "main", None),
    ]
    book.add(games[:1])
    # Between equals the winner expects 0.5 and scores 1: +K/2 = +16, the loser -16.
    assert book.elo.rating("main") == pytest.approx(1016.0) and book.elo.rating(FIRST) == pytest.approx(984.0)
    assert book.margin(FIRST) == pytest.approx(32.0)
    assert book.margin("main-00010") is None  # not played yet
    book.add(games[1:])
    assert book.games == 6
    assert book.records == {
        FIRST: Record(wins=2, draws=1, losses=1),
        "main-00010": Record(losses=1),
        "main_v1": Record(draws=1),
    }
    assert book.elo.games["main"] == 6 and book.elo.games[FIRST] == 4
    # Zero sum: every game moves both ratings by the same amount, so the ratings' sum stays 1000 a policy.
    assert sum(book.elo.ratings.values()) == pytest.approx(1000.0 * len(book.elo.ratings))


def test_the_matchmakers_weigh_the_league_by_the_books_record() -> None:
    book = ResultsBook()
    book.add([game("main", FIRST, "main")] * 8 + [game("main", "main-00010", "main-00010")] * 2)
    league = book.league([FIRST, "main-00010", "main-00020"])
    assert league == League("main", (FIRST, "main-00010", "main-00020"), book.records)
    # Win rates with the prior of one win and one loss: 9/10, 1/4 and (new) 1/2.
    p = np.array([0.9, 0.25, 0.5])
    np.testing.assert_allclose(PrioritizedFictitiousSelfPlay().weights(league), (1 - p) ** 2 / ((1 - p) ** 2).sum())
    np.testing.assert_allclose(Uniform().weights(league), [1 / 3] * 3)


def test_the_verdict_needs_the_margin_and_is_met_at_it() -> None:
    assert verdict(200.0, 200.0)[0] and not verdict(199.9, 200.0)[0]
    assert verdict(-50.0, -100.0) == (True, f"{FIRST} out-rated by -50 Elo (>= -100 asked)")
    met, line = verdict(None, 0.0)
    assert not met and "never played" in line


def test_the_table_shows_the_top_rows_and_always_main_and_the_first_snapshot() -> None:
    book = ResultsBook()
    book.add([game("main", f"main-{i:05d}", f"main-{i:05d}") for i in range(10, 60, 10)])
    book.add([game("main", FIRST, "main")] * 3)
    lines = table_lines(book.elo, top=2)
    policies = [line.split()[0] for line in lines[1:]]
    assert lines[0].split() == ["POLICY", "RATING", "GAMES", "W", "D", "L"]
    assert policies[:2] == [row[0] for row in book.elo.table(top=2)]
    assert {"main", FIRST} <= set(policies) and len(policies) <= 4
    ratings = [float(line.split()[1]) for line in lines[1:]]
    assert ratings == sorted(ratings, reverse=True)

"""`make demo-league`'s learner for real, on a short budget: `rolloutfleet run` (a real
redis-server, a real worker) and the league learner. What it leaves in Redis is checked:
a snapshot every N updates named and stepped by its update, each the parent of the next,
a plan over all of them, and the workers' games against them with tic-tac-toe's own
outcomes; the Elo it prints is the store's own replay of the games it read. And the
learner's incremental book agrees with the store's replay of the whole stream."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rolloutfleet.examples.league_play import FIRST, ResultsBook, snapshot_name
from rolloutfleet.league.records import MatchResult
from rolloutfleet.league.standings import parse_standings
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.spec.job import RolloutJob

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
JOB = "tictactoe-league"


def short_manifest(tmp_path: Path) -> Path:
    """examples/tictactoe-league.yaml with one worker and a plan read every 0.5 s (the run is short)."""
    manifest = RolloutJob.from_file(REPO / "examples/tictactoe-league.yaml").to_dict()
    manifest["spec"]["replicas"] = 1
    manifest["spec"]["league"]["planRefreshSeconds"] = 0.5
    path = tmp_path / "league.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_the_learner_grows_a_league_that_the_workers_play(redis_url: str, tmp_path: Path) -> None:
    manifest, saved = short_manifest(tmp_path), tmp_path / "main.pt"
    learner = [sys.executable, "-m", "rolloutfleet.examples.league_play", str(manifest), "--env-steps", "30000",
               "--snapshot-every", "2", "--plan-every", "1", "--eval-every", "2", "--eval-games", "20",
               "--table-every", "4", "--min-margin", "-10000", "--save", str(saved)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status",
         "--", *learner],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    stopped = re.search(r"stopped at .*: (\d+) updates, (\d+) rows of main", out)
    rated = re.search(r"Elo from (\d+) games", out)
    final = re.search(rf"main (\d+), {FIRST} (\d+): ", out)
    assert stopped and rated and final, out[-3000:]
    updates, rows = int(stopped[1]), int(stopped[2])
    assert rows >= 30000 and updates >= 4

    with PolicyStore(redis_url, JOB) as store:
        snapshots = store.snapshots()
        expected = [snapshot_name(u) for u in range(0, updates + 1, 2)]
        assert [s.name for s in snapshots] == expected
        assert [s.step for s in snapshots] == list(range(0, updates + 1, 2))
        assert [s.parent for s in snapshots] == [None, *expected[:-1]]
        assert sorted(store.plan()) == expected  # PFSP gives every snapshot some weight
        played = [result for _, result in store.results()]
        for result in played:
            assert sorted(result.returns.values()) in ([-1.0, 1.0], [0.0, 0.0])  # tic-tac-toe's outcomes
            (opponent,) = set(result.seats.values()) - {"main"}
            assert opponent in {*expected, "main_v1"}  # main_v1: games before the worker read a plan
        assert len({opponent for r in played for opponent in r.seats.values()} & set(expected[1:])) >= 1
        # The learner's table is the store's replay of the games it had read (the worker wrote on).
        games = int(rated[1])
        assert 0 < games <= len(played)
        table = store.ratings(results=played[:games])
        assert (f"{table.rating('main'):.0f}", f"{table.rating(FIRST):.0f}") == (final[1], final[2])
        # The standings the job's status shows: the learner's table when it last planned.
        standings = parse_standings(store.client.get(store.standings_key))
        assert standings is not None and standings.main == "main" and 0 < standings.matches <= games
        assert standings.snapshots == len(expected)
        weights = torch.load(saved)
        assert {k: tuple(v.shape) for k, v in weights.items()} == {
            k: v.shape for k, v in store.load(expected[-1]).items()
        }


def test_the_book_read_in_pieces_is_the_stores_replay_of_the_stream(redis_url: str) -> None:
    outcomes = [(1.0, -1.0), (0.0, 0.0), (-1.0, 1.0)]
    with PolicyStore(redis_url, JOB) as store:
        book = ResultsBook()
        assert book.read(store) == 0
        for i in range(60):
            first, second = ("main", f"main-{i % 4:05d}") if i % 2 else (f"main-{i % 4:05d}", "main")
            a, b = outcomes[i * 7 % 3]
            store.record_result(MatchResult({"player_1": first, "player_2": second}, {"player_1": a, "player_2": b}))
            if i % 17 == 0:
                book.read(store)
        book.read(store)
        assert book.read(store) == 0 and book.games == 60
        assert book.elo.ratings == pytest.approx(store.ratings().ratings)
        assert dict(book.elo.games) == dict(store.ratings().games)
        league = store.league("main")
        assert book.records == dict(league.stats)

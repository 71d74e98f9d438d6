"""``rolloutfleet league`` as the CLI runs it, on a league written through the store."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rolloutfleet.cli.main import main
from rolloutfleet.league.records import MatchResult
from rolloutfleet.league.store import PolicyStore

pytestmark = pytest.mark.integration


def test_league_prints_snapshots_and_the_elo_table(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with PolicyStore(redis_url, "ttt", "team") as store:
        store.snapshot("main-0010", {"w": np.zeros(3, np.float32)}, step=10, tags=["gen1"])
        store.snapshot("main-0020", {"w": np.ones(3, np.float32)}, parent="main-0010", step=20)
        for opponent, main_return in (("main-0010", 1.0), ("main-0010", 1.0), ("main-0020", -1.0)):
            store.record_result(MatchResult({"x": "main", "o": opponent}, {"x": main_return, "o": -main_return}))
    capsys.readouterr()
    assert main(["league", "--redis", redis_url, "--job", "ttt", "--namespace", "team"]) == 0
    out = capsys.readouterr().out
    assert "league team/ttt: 2 snapshot(s), 3 match(es) recorded" in out
    snapshot_rows = [line.split() for line in out.splitlines() if line.startswith("main-00")]
    assert snapshot_rows[0][:3] == ["main-0010", "10", snapshot_rows[0][2]] and snapshot_rows[0][-1] == "gen1"
    assert snapshot_rows[1][0] == "main-0020" and "main-0010" in snapshot_rows[1]
    assert main(["league", "--redis", redis_url, "--job", "ttt", "--namespace", "team", "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ratings = {row["policy"]: row for row in data["ratings"]}
    # main beat main-0010 twice and lost to main-0020 once: 32 x 0.5, then about 32 x 0.54 up,
    # then down; main-0010 lost twice.
    assert ratings["main"]["games"] == 3 and (ratings["main"]["wins"], ratings["main"]["losses"]) == (2, 1)
    assert ratings["main-0010"]["rating"] < 1000 < ratings["main-0020"]["rating"]
    assert [s["name"] for s in data["snapshots"]] == ["main-0010", "main-0020"] and data["matches"] == 3


def test_league_refuses_a_bad_top(redis_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["league", "--redis", redis_url, "--job", "ttt", "--top", "0"]) == 2
    assert "--top must be > 0, got 0" in capsys.readouterr().err

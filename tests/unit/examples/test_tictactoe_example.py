"""examples/tictactoe.yaml as a user runs it (``rolloutfleet sample``), checked from the npz
alone against tic-tac-toe's own rules: a move is legal exactly when its cell is empty,
the players alternate (X first), a finished game pays +1/-1 or 0/0, and the loser's last
row carries its -1 though the winner moved last. The example's mapping seats ``main`` first
in games with an even ``eps_id`` and second in the others, ``main_v1`` in the other seat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
POLICIES = ("main", "main_v1")


@pytest.fixture(scope="module")
def sampled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, np.ndarray]:
    output = tmp_path_factory.mktemp("ttt") / "ttt.npz"
    assert main(["sample", str(ROOT / "examples/tictactoe.yaml"), "--steps", "640", "--output", str(output)]) == 0
    with np.load(output, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def policy_rows(data: dict[str, np.ndarray], policy: str) -> dict[str, np.ndarray]:
    prefix = f"{policy}/"
    return {name[len(prefix) :]: value for name, value in data.items() if name.startswith(prefix)}


def seats(rows: dict[str, np.ndarray]) -> np.ndarray:
    """Each row's seat from the batch's own agent ids: 0 for player_1 (X), 1 for player_2 (O)."""
    names = rows["agent_id"].astype(str)
    assert set(names.tolist()) <= {"player_1", "player_2"}
    return (names == "player_2").astype(np.int64)


def test_seats_alternate_by_episode_and_only_legal_moves_are_made(sampled: dict[str, np.ndarray]) -> None:
    for policy in POLICIES:
        rows = policy_rows(sampled, policy)
        assert len(rows["actions"]) > 100
        main_first = rows["eps_id"] % 2 == 0
        np.testing.assert_array_equal(seats(rows) == 0, main_first if policy == "main" else ~main_first)
        assert 0 < seats(rows).mean() < 1  # both seats played
        board = rows["obs/observation"]  # (rows, 3, 3, 2): the mover's marks, the opponent's
        assert board.dtype == np.int8 and board.shape[1:] == (3, 3, 2)
        empty = (board.sum(axis=3) == 0).reshape(-1, 9)
        np.testing.assert_array_equal(rows["obs/action_mask"] != 0, empty)  # the rule behind the mask
        np.testing.assert_array_equal(rows["action_mask"], empty)
        assert empty[np.arange(len(empty)), rows["actions"]].all()  # every move on an empty cell


def test_players_alternate_x_first(sampled: dict[str, np.ndarray]) -> None:
    """Before its t-th move X has t marks and O t; O has t marks and X t + 1."""
    for policy in POLICIES:
        rows = policy_rows(sampled, policy)
        board, t, ahead = rows["obs/observation"], rows["t"], seats(rows)
        np.testing.assert_array_equal(board[..., 0].sum(axis=(1, 2)), t)
        np.testing.assert_array_equal(board[..., 1].sum(axis=(1, 2)), t + ahead)
        # After its move (new_obs, at its next turn or the game's end) its own mark is on the board.
        own_after = rows["new_obs/observation"][..., 0].reshape(-1, 9)
        assert own_after[np.arange(len(t)), rows["actions"]].all()


def games(data: dict[str, np.ndarray]) -> dict[int, dict[str, dict[str, Any]]]:
    """eps_id -> policy -> its last row's reward, flags and t (games whose both players' last rows were sampled)."""
    found: dict[int, dict[str, dict[str, Any]]] = {}
    for policy in POLICIES:
        rows = policy_rows(data, policy)
        for i in np.flatnonzero(rows["terminateds"] | rows["truncateds"]):
            found.setdefault(int(rows["eps_id"][i]), {})[policy] = {
                "reward": float(rows["rewards"][i]),
                "terminated": bool(rows["terminateds"][i]),
                "t": int(rows["t"][i]),
                "board": rows["new_obs/observation"][i],
            }
    return {eps: players for eps, players in found.items() if len(players) == 2}


def wins(board: np.ndarray) -> bool:
    """Three in a row on one plane of a 3x3 board."""
    lines = [*board, *board.T, board.diagonal(), np.fliplr(board).diagonal()]
    return any(line.all() for line in lines)


def test_finished_games_are_zero_sum_and_the_loser_carries_the_loss(sampled: dict[str, np.ndarray]) -> None:
    finished = games(sampled)
    assert len(finished) >= 30
    outcomes = set()
    for players in finished.values():
        x, o = players["main"], players["main_v1"]  # in either seat
        assert x["terminated"] and o["terminated"]  # tic-tac-toe ends by its rules, never by a limit
        assert x["reward"] + o["reward"] == 0.0
        for me, other in ((x, o), (o, x)):
            if me["reward"] == 1.0:  # the winner has three in a row on its own plane
                assert wins(me["board"][..., 0]) and other["reward"] == -1.0
                assert wins(other["board"][..., 1])  # the loser's last row sees the line that beat it
        moves = x["t"] + 1 + o["t"] + 1
        if x["reward"] == 0.0:
            assert moves == 9  # a draw fills the board
        outcomes.add((x["reward"], o["reward"]))
    assert (1.0, -1.0) in outcomes and (-1.0, 1.0) in outcomes  # both policies win some games

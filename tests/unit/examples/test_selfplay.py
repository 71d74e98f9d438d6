"""The self-play learner's parts, checked against what is known outside them: the workers'
recorded log-probabilities (the learner's masked distribution must give the same), the
rows' own turn counters, and tic-tac-toe's game theory (perfect play never loses, and
two perfect players always draw) for the evaluation that counts outcomes."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rolloutfleet import RolloutJob, SampleBatch
from rolloutfleet.examples.ppo import PPO
from rolloutfleet.examples.seats import alternate_seats
from rolloutfleet.examples.selfplay import env_maker, evaluate, in_episode_order, play_games, random_player
from rolloutfleet.fleet.runner_factory import build_policy_models, make_env_runner
from rolloutfleet.inference.obs_spaces import obs_parts
from rolloutfleet.sampling.multiagent.policy_mapping import EpisodeInfo

ROOT = Path(__file__).resolve().parents[3]
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


@pytest.fixture(scope="module")
def job() -> RolloutJob:
    return RolloutJob.from_file(ROOT / "examples" / "tictactoe.yaml")


@pytest.fixture(scope="module")
def main_rows(job: RolloutJob) -> SampleBatch:
    runner = make_env_runner(job)
    try:
        return SampleBatch(runner.sample()["main"])
    finally:
        runner.close()


def test_the_seats_alternate_with_the_episode_number() -> None:
    for eps_id in range(6):
        episode = EpisodeInfo(env_index=0, eps_id=eps_id, worker_index=0)
        picks = (alternate_seats("player_1", episode), alternate_seats("player_2", episode))
        assert picks == (("main", "main_v1") if eps_id % 2 == 0 else ("main_v1", "main"))


def test_the_learners_masked_distribution_gives_the_workers_log_probabilities(
    job: RolloutJob, main_rows: SampleBatch
) -> None:
    env = env_maker(job)()
    parts = obs_parts(env.observation_space("player_1"), env.action_space("player_1"))
    model = build_policy_models(job)["main"]  # the weights the workers sampled with
    ppo = PPO(model, env.action_space("player_1"), inputs=parts.batch_input)
    mask = torch.as_tensor(main_rows["action_mask"])
    assert not mask.all(), "some moves were illegal in the sampled positions"
    actions = torch.as_tensor(main_rows["actions"])
    with torch.no_grad():
        logits, _ = model(torch.as_tensor(parts.batch_input(main_rows)))
        masked = ppo._distribution(logits, mask)
        unmasked = ppo._distribution(logits)
    np.testing.assert_allclose(masked.log_prob(actions).numpy(), main_rows["action_logp"], atol=1e-5)
    assert (masked.probs[~mask] == 0).all()
    assert not np.allclose(unmasked.log_prob(actions).numpy(), main_rows["action_logp"], atol=1e-3)
    stats = ppo.update(in_episode_order(main_rows))
    assert np.isfinite(stats["policy_loss"]) and np.isfinite(stats["value_loss"])


def test_episode_order_puts_each_agents_turns_together(main_rows: SampleBatch) -> None:
    ordered = in_episode_order(main_rows)
    assert sorted(ordered["t"].tolist()) == sorted(main_rows["t"].tolist())
    for chunk in ordered.split_by_episode():
        assert len(set(chunk["agent_index"].tolist())) == 1  # main plays one seat per game
        np.testing.assert_array_equal(chunk["t"], np.arange(chunk["t"][0], chunk["t"][0] + len(chunk)))


@cache
def best_score(board: tuple[int, ...]) -> int:
    """Minimax value for the player to move on ``board`` (1 own, -1 theirs, 0 empty): +1, 0 or -1."""
    if any(board[a] == board[b] == board[c] == -1 for a, b, c in LINES):
        return -1  # the previous mover (the opponent) completed a line
    moves = [i for i in range(9) if board[i] == 0]
    if not moves:
        return 0
    return max(-best_score(tuple(-v for v in _play(board, i))) for i in moves)


def _play(board: tuple[int, ...], cell: int) -> tuple[int, ...]:
    return (*board[:cell], 1, *board[cell + 1 :])


def perfect_player(observation: dict[str, np.ndarray], rng: np.random.Generator) -> int:
    """A minimax move from PettingZoo's observation (planes: the mover's marks, the opponent's).
    PettingZoo numbers the cells column by column; minimax does not care how they are numbered."""
    planes = np.asarray(observation["observation"]).reshape(9, 2)
    board = tuple(int(own) - int(theirs) for own, theirs in planes)
    legal = np.flatnonzero(observation["action_mask"])
    return int(max(legal, key=lambda i: -best_score(tuple(-v for v in _play(board, int(i))))))


def test_perfect_play_never_loses_to_a_random_player_and_two_perfect_players_draw(job: RolloutJob) -> None:
    make_env = env_maker(job)
    results = evaluate(make_env, perfect_player, games=60, seed=3)
    assert results["all"].games == 60 and results["all"].losses == 0
    assert results["player_1"].wins > 20  # moving first, perfect play beats a random player almost always
    draws = play_games(make_env, perfect_player, perfect_player, games=4, seat="player_1", seed=0)
    assert (draws.wins, draws.draws, draws.losses) == (0, 4, 0)


def test_a_random_player_wins_and_loses_against_itself(job: RolloutJob) -> None:
    first = play_games(env_maker(job), random_player, random_player, games=200, seat="player_1", seed=1)
    # Random against random: the first player wins about 58 % of tic-tac-toe games, loses about 29 %.
    assert 0.45 < first.win_rate < 0.72 and 0.18 < first.loss_rate < 0.40


def test_an_illegal_move_is_an_error_not_an_outcome(job: RolloutJob) -> None:
    def occupied_cell(observation: dict[str, Any], rng: np.random.Generator) -> int:
        taken = np.flatnonzero(np.asarray(observation["action_mask"]) == 0)
        return int(taken[0]) if len(taken) else 0

    with pytest.raises(RuntimeError, match="illegal move"):
        play_games(env_maker(job), occupied_cell, random_player, games=1, seat="player_2", seed=0)

"""Evaluation episodes against CartPole played by the test itself through gymnasium."""

from __future__ import annotations

from typing import Any

import numpy as np

from rolloutfleet.evaluation.episodes import EpisodePlayer
from rolloutfleet.spec.job import RolloutJob
from tests.evaluation_kit import ANGLE, gymnasium_return, lean_weights, leaning


def cartpole_job(**evaluation: Any) -> RolloutJob:
    spec: dict[str, Any] = {"env": {"id": "CartPole-v1"}, "evaluation": evaluation}
    return RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": spec})


def test_greedy_episodes_are_what_gymnasium_gives_with_the_same_seeds() -> None:
    player = EpisodePlayer(cartpole_job())
    seeds = [1_000_000 + i for i in range(5)]
    # Angle only: a poor balancer whose episodes' lengths differ from seed to seed.
    player.policy.set_weights(lean_weights(player.policy.get_weights(), ANGLE), seq_no=1)
    played = [player.play(seed) for seed in seeds]
    assert played == [gymnasium_return(seed, leaning(ANGLE)) for seed in seeds]
    assert len({length for _, length in played}) > 1 and max(length for _, length in played) < 500
    assert [player.play(seed) for seed in seeds] == played  # greedy: the same again
    # Angle and angular velocity: balances until CartPole-v1's 500-step limit.
    player.policy.set_weights(lean_weights(player.policy.get_weights()), seq_no=2)
    expected = [gymnasium_return(seed, leaning()) for seed in seeds]
    assert [player.play(seed) for seed in seeds] == expected == [(500.0, 500)] * 5


def test_a_constant_policy_and_the_env_config_override() -> None:
    player = EpisodePlayer(cartpole_job(envConfig={"sutton_barto_reward": True}))
    weights = {name: np.zeros_like(value) for name, value in player.policy.get_weights().items()}
    weights["pi.bias"][1] = 1.0  # always push right
    player.policy.set_weights(weights, seq_no=1)
    expected = gymnasium_return(7, lambda _obs: 1, sutton_barto_reward=True)
    assert player.play(7) == expected
    assert expected[0] == -1.0  # Sutton and Barto's reward: 0 per step, -1 at the fall


def test_max_episode_steps_cuts_an_episode() -> None:
    player = EpisodePlayer(cartpole_job(maxEpisodeSteps=5))
    player.policy.set_weights(lean_weights(player.policy.get_weights()), seq_no=1)
    assert player.play(1) == (5.0, 5)


def test_exploring_evaluation_samples_the_distribution() -> None:
    # Uniform logits: greedy always takes action 0 (3 steps or so to fall one way);
    # explore: true samples, so the same seed gives other episodes with other policy seeds.
    player = EpisodePlayer(cartpole_job(explore=True))
    zeros = {name: np.zeros_like(value) for name, value in player.policy.get_weights().items()}
    player.policy.set_weights(zeros, seq_no=1)
    lengths = {player.play(3)[1] for _ in range(20)}
    assert len(lengths) > 1
    greedy = EpisodePlayer(cartpole_job())
    greedy.policy.set_weights(zeros, seq_no=1)
    assert greedy.play(3) == gymnasium_return(3, lambda _obs: 0)

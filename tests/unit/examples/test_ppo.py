"""The PPO example learns CartPole (a seeded smoke test, in-process, no Redis), and its
GAE agrees with a hand-computed case."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.examples.ppo import PPO, EpisodeReturns, PPOConfig
from rolloutfleet.fleet.runner_factory import build_model


def test_ppo_improves_cartpole_within_a_step_budget() -> None:
    torch.manual_seed(0)
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "cp"},
            "spec": {
                "env": {"id": "CartPole-v1", "numEnvs": 8},
                "policy": {"vfShareLayers": False},
                "sampling": {"seed": 0, "rolloutFragmentLength": 256},
            },
        }
    )
    runner = EnvRunner(job)
    model = build_model(job)
    # The learner's model starts from the workers' weights.
    for name, value in runner.get_weights()["default"].items():
        np.testing.assert_array_equal(model.state_dict()[name].numpy(), value)
    ppo = PPO(model, gym.spaces.Discrete(2))
    returns = EpisodeReturns()
    returns.add(runner.sample())
    initial = returns.mean
    for version in range(1, 31):  # ~60 K env steps
        batch = runner.sample()
        returns.add(batch)
        ppo.update(batch)
        runner.set_weights("default", {k: v.numpy() for k, v in model.state_dict().items()}, seq_no=version)
    assert initial < 40  # a random policy keeps CartPole up for ~20 steps
    assert returns.mean > 200, returns.mean


def test_gae_bootstraps_truncation_but_not_termination() -> None:
    class ConstantValue(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unused = torch.nn.Parameter(torch.zeros(1))

        def forward(self, obs: torch.Tensor) -> tuple[None, torch.Tensor]:
            return None, torch.full((len(obs),), 10.0)

    ppo = PPO(ConstantValue(), gym.spaces.Discrete(2), PPOConfig(gamma=0.5, lam=1.0))
    batch = {
        "rewards": np.array([1.0, 1.0, 1.0, 1.0], np.float32),
        "vf_preds": np.array([0.0, 0.0, 0.0, 0.0], np.float32),
        "terminateds": np.array([False, True, False, False]),
        "truncateds": np.array([False, False, False, True]),
        "eps_id": np.array([1, 1, 2, 2]),
        "t": np.array([0, 1, 0, 1]),
        "new_obs": np.zeros((4, 1), np.float32),
    }
    advantages, _ = ppo.advantages(batch)
    # Episode 1 terminates: 1 + 0.5 * 1 = 1.5 then 1. Episode 2 is truncated: its last row
    # bootstraps V(new_obs) = 10: 1 + 0.5 * 10 = 6, and 1 + 0.5 * 6 = 4 before it.
    np.testing.assert_allclose(advantages, [1.5, 1.0, 4.0, 6.0])

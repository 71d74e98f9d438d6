"""Exploration through the runners: each row's exploration_scale is the ε or σ its action was
taken with, the actions' statistics match it, and OU noise restarts with each episode."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.spec.job import RolloutJob


def within_binomial(count: int, rows: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - rows * p) <= sigmas * math.sqrt(rows * p * (1 - p))


def cartpole(exploration: dict[str, Any], envs: int = 8, fragment: int = 250) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": {
        "env": {"id": "CartPole-v1", "numEnvs": envs}, "policy": {"hidden": [16], "exploration": exploration},
        "sampling": {"rolloutFragmentLength": fragment, "seed": 1}}})  # fmt: skip


def non_greedy(batch: Any, rows: np.ndarray | slice = slice(None)) -> int:
    return int((batch["actions"][rows] != batch["action_dist_inputs"][rows].argmax(axis=1)).sum())


def test_constant_epsilon_rows_record_it_and_deviate_from_the_argmax_at_epsilon_over_two() -> None:
    batch = EnvRunner(cartpole({"type": "epsilonGreedy", "epsilon": 0.3})).sample()
    assert np.all(batch["exploration_scale"] == np.float32(0.3)) and len(batch) == 2000
    assert within_binomial(non_greedy(batch), len(batch), 0.3 / 2)  # a uniform pick of 2 actions misses half the time


def test_stochastic_jobs_have_no_exploration_column() -> None:
    assert "exploration_scale" not in EnvRunner(cartpole({})).sample()


def test_a_schedule_follows_the_global_step_applied_between_fragments() -> None:
    runner = EnvRunner(cartpole({"type": "epsilonGreedy", "schedule": {"initial": 1.0, "final": 0.0, "steps": 1000}}))
    first = runner.sample()
    assert np.all(first["exploration_scale"] == 1.0) and within_binomial(non_greedy(first), len(first), 0.5)
    runner.set_global_step(600)  # ε = 0.4
    second = runner.sample()
    later = second["exploration_scale"] == np.float32(0.4)
    # Rows stepped before the update (carried over from the last fragment) keep ε = 1.
    assert set(np.unique(second["exploration_scale"]).tolist()) <= {1.0, np.float32(0.4)} and later.sum() > 1500
    assert within_binomial(non_greedy(second, later), int(later.sum()), 0.2)
    assert runner.get_metrics()["policy/default/exploration_scale"] == np.float32(0.4)
    assert runner.get_metrics()["global_step"] == 600
    greedy = runner.sample(explore=False)
    fresh = greedy["exploration_scale"] == 0.0
    assert fresh.sum() > 1500 and non_greedy(greedy, fresh) == 0


def test_a_new_runner_given_the_state_explores_at_the_scheduled_scale() -> None:
    schedule = {"type": "epsilonGreedy", "schedule": {"initial": 1.0, "final": 0.0, "steps": 1000}}
    runner = EnvRunner(cartpole(schedule))
    runner.set_global_step(750)  # ε = 1 - 750 / 1000
    fresh = EnvRunner(cartpole(schedule), worker_index=1)
    fresh.set_state(runner.get_state())
    assert fresh.global_step == 750 and fresh.get_metrics()["global_step"] == 750
    assert np.all(fresh.sample()["exploration_scale"] == np.float32(0.25))


def test_ape_x_workers_each_sample_with_their_own_epsilon() -> None:
    for index in (0, 2):
        batch = EnvRunner(
            cartpole({"type": "epsilonGreedy", "perWorker": {}}), worker_index=index, num_workers=3
        ).sample()
        epsilon = 0.4 ** (1 + 7 * index / 2)
        assert np.allclose(batch["exploration_scale"], epsilon)
        assert within_binomial(non_greedy(batch), len(batch), epsilon / 2)


class Drift(gym.Env[np.ndarray, np.ndarray]):
    """Unbounded 1-D actions, constant observations, episodes of ``length`` steps."""

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.length = int(ctx.get("length", 6))
        self.observation_space = spaces.Box(-1, 1, (2,), np.float32)
        self.action_space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.steps = 0
        return np.full(2, 0.5, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        return np.full(2, 0.5, np.float32), 0.0, False, self.steps >= self.length, {}


def make_drift(ctx: dict[str, Any]) -> Drift:
    return Drift(ctx)


def test_ornstein_uhlenbeck_noise_replays_from_the_batch_and_restarts_with_each_episode() -> None:
    sigma, theta = 0.5, 0.15
    job = RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": {
        "env": {"entryPoint": f"{__name__}:make_drift", "numEnvs": 16},
        "policy": {"hidden": [8], "exploration": {"type": "ornsteinUhlenbeck", "sigma": sigma, "theta": theta}},
        "sampling": {"rolloutFragmentLength": 250, "seed": 2}}})  # fmt: skip
    batch = EnvRunner(job).sample()
    assert np.all(batch["exploration_scale"] == np.float32(sigma))
    x = (batch["actions"] - batch["action_dist_inputs"][:, :1])[:, 0].astype(np.float64)  # half-width 1
    t, eps = batch["t"], batch["eps_id"]
    follows = np.zeros(len(x), bool)
    follows[1:] = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1)
    starts = t == 0
    innovation = np.where(follows, x - (1 - theta) * np.roll(x, 1), x)
    # Every row's innovation is σ·N(0, 1): at episode starts (fresh state) as in mid-episode.
    for rows in (starts, follows):
        n = int(rows.sum())
        assert n > 300 and abs(float(innovation[rows].var()) / sigma**2 - 1) < 5 * math.sqrt(2 / n), n


WALK = {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk", "numEnvs": 4}


def test_multi_agent_policies_explore_as_their_overrides_say() -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "ma"}, "spec": {
        "env": WALK, "policy": {"hidden": [8]},
        "multiAgent": {"policies": {"even": {"exploration": {"type": "epsilonGreedy", "epsilon": 0.6}}, "odd": {}},
                       "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:even_odd"}},
        "sampling": {"rolloutFragmentLength": 400, "seed": 3}}})  # fmt: skip
    runner = MultiAgentEnvRunner(job)
    batch = runner.sample()
    even, odd = batch["even"], batch["odd"]
    assert "exploration_scale" not in odd and np.all(even["exploration_scale"] == np.float32(0.6))
    assert within_binomial(non_greedy(even), len(even), 0.6 * 2 / 3)  # 3 actions: a uniform pick misses 2/3
    runner.set_global_step(5)  # no schedule: nothing changes
    assert runner.exploration_scales() == {"even": 0.6}

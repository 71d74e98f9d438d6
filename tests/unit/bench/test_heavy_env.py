"""The async bench's CPU-bound env: CartPole's own dynamics, through the job's entry point."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rolloutfleet import EnvRunner, RolloutJob


def test_burn_cartpole_steps_exactly_as_cartpole() -> None:
    from bench.heavy_env import BurnCartPole

    heavy, plain = BurnCartPole(burn_ms=0.1), gym.make("CartPole-v1").unwrapped
    obs, _ = heavy.reset(seed=3)
    np.testing.assert_array_equal(obs, plain.reset(seed=3)[0])
    for action in [0, 1, 1, 0, 1]:
        a, b = heavy.step(action), plain.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4]


def test_the_entry_point_samples_with_async_sub_envs() -> None:
    env = {"entryPoint": "bench.heavy_env:make", "config": {"burnMs": 0.1}, "numEnvs": 2, "vectorization": "async"}
    spec = {"env": env, "resources": {"cpu": "1"}, "sampling": {"rolloutFragmentLength": 5}}
    runner = EnvRunner(RolloutJob.from_dict({"metadata": {"name": "h"}, "spec": spec}))
    try:
        batch = runner.sample()
    finally:
        runner.close()
    assert len(batch) == 10
    assert np.all(np.abs(batch["obs"][:, 2]) < 0.21)  # CartPole's pole angle stays within its bound

"""spec.env.wrappers around real envs: what each wrapper documents shows in the batches."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rolloutfleet import EnvRunner, RolloutJob, SampleBatch
from rolloutfleet.sampling.vector.make import choose_vectorization


def job(env: dict[str, Any], fragment: int = 50) -> RolloutJob:
    spec = {"env": env, "sampling": {"seed": 0, "rolloutFragmentLength": fragment}}
    return RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": spec})


def test_time_limit_truncates_at_its_step_and_clip_reward_bounds_rewards() -> None:
    wrappers = [
        {"name": "TimeLimit", "args": {"max_episode_steps": 6}},
        {"name": "ClipReward", "args": {"max_reward": 0.25}},
    ]
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 3, "wrappers": wrappers}))
    assert runner.vectorization == "sync"  # auto: CartPole's own vector env cannot be wrapped per sub-env
    batch = runner.sample()
    truncated = batch["truncateds"] & ~batch["terminateds"]
    assert truncated.any() and np.all(batch["t"][truncated] == 5)
    assert batch["t"].max() <= 5
    np.testing.assert_array_equal(batch["rewards"], 0.25)  # CartPole pays 1 per step


def test_pong_preprocessed_and_stacked_samples_with_the_nature_cnn() -> None:
    wrappers = [
        {"name": "AtariPreprocessing", "args": {"frame_skip": 4, "screen_size": 84}},
        {"name": "FrameStackObservation", "args": {"stack_size": 4}},
    ]
    env = {"id": "ALE/Pong-v5", "config": {"frameskip": 1}, "numEnvs": 2, "wrappers": wrappers}
    runner = EnvRunner(job(env, fragment=30))
    assert runner.observation_space.shape == (4, 84, 84) and runner.observation_space.dtype == np.uint8
    batch = SampleBatch.concat([runner.sample(), runner.sample()])
    assert batch["obs"].shape == (120, 4, 84, 84)
    assert set(np.unique(batch["actions"])) <= set(range(6))  # Pong's six actions
    # FrameStackObservation: each step pushes one frame in, so s' holds s's last three frames.
    np.testing.assert_array_equal(batch["new_obs"][:, :3], batch["obs"][:, 1:])
    assert (batch["obs"][:, -1] != batch["obs"][:, 0]).any()  # frames, not one frame repeated
    assert np.isfinite(batch["vf_preds"]).all()
    first = next(m for m in runner.policy.torch_model().modules() if isinstance(m, torch.nn.Conv2d))
    assert (first.in_channels, first.kernel_size, first.stride) == (4, (8, 8), (4, 4))  # Nature CNN, CHW


def test_atari_ids_without_wrappers_use_ale_s_vector_env() -> None:
    env = {"id": "ALE/Pong-v5", "numEnvs": 2}
    assert choose_vectorization(job(env).spec.env) == "vector"
    runner = EnvRunner(job(env, fragment=20))
    try:
        batch = runner.sample()
    finally:
        runner.close()
    assert batch["obs"].shape == (40, 4, 84, 84)  # ale-py's vector env preprocesses and stacks 4 frames
    np.testing.assert_array_equal(batch["new_obs"][:, :3], batch["obs"][:, 1:])


def test_a_learner_s_model_for_ale_s_vector_env_fits_the_workers() -> None:
    """build_model reads the spaces the workers sample (ale-py's vector env preprocesses and
    stacks frames), so the learner's state dict is one the workers load."""
    from rolloutfleet.fleet.runner_factory import build_model

    pong = job({"id": "ALE/Pong-v5", "numEnvs": 2}, fragment=20)
    runner = EnvRunner(pong)
    try:
        learner_weights = build_model(pong).state_dict()
        assert runner.policy.set_weights(learner_weights, 1)
    finally:
        runner.close()

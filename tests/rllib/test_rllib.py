"""RLlib's algorithms on a fleet, judged by RLlib itself: its module's own forward pass on the
weights the workers load, its episodes built from real CartPole fragments in a real
redis-server, and its PPO learning from real worker processes under `rolloutfleet run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.integrations.rllib import ModuleRefused, on_fleet
from rolloutfleet.integrations.rllib_layout import model_config
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.weights import WeightSubscriber

REPO = Path(__file__).resolve().parents[2]
CARTPOLE = REPO / "examples" / "cartpole.yaml"


@pytest.fixture(scope="module")
def job() -> RolloutJob:
    return RolloutJob.from_file(CARTPOLE)


def rllib_logits(module: Any, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.as_tensor(obs, dtype=torch.float32)})
    return out[Columns.ACTION_DIST_INPUTS].numpy()


def workers_network(runner: Any, redis_url: str, job: RolloutJob) -> torch.nn.Module:
    """What the runner publishes (as RLlib's weight sync does), loaded as a worker loads it."""
    version = runner.publish()
    fetched = WeightSubscriber(redis_url, job).poll()
    assert fetched is not None and fetched.seq_no == version
    workers = build_model(job)
    workers.load_state_dict({name: torch.as_tensor(value) for name, value in fetched.weights.items()})
    return workers


def observations(env_id: str, count: int) -> np.ndarray:
    space = gym.make(env_id).observation_space
    return np.stack([space.sample() for _ in range(count)])


def test_rllibs_module_and_the_workers_network_compute_the_same_logits(job: RolloutJob, redis_url: str) -> None:
    config = on_fleet(PPOConfig(), job, redis_url)
    runner = config.env_runner_cls(config=config)
    try:
        assert runner.published is None
        workers = workers_network(runner, redis_url, job)
        obs = observations("CartPole-v1", 16)
        with torch.no_grad():
            ours = workers(torch.as_tensor(obs))[0].numpy()
        np.testing.assert_allclose(ours, rllib_logits(runner.module, obs), rtol=1e-5, atol=1e-6)
    finally:
        runner.stop()


def test_a_model_rllib_would_build_otherwise_is_refused_naming_what_differs(job: RolloutJob, redis_url: str) -> None:
    config = on_fleet(PPOConfig().rl_module(model_config={"fcnet_hiddens": [256, 256]}), job, redis_url)
    with pytest.raises(ModuleRefused, match=r"fcnet_hiddens=\[256, 256\] \(the workers' spec.policy.hidden is \[64, 64\]\)"):  # fmt: skip
        config.env_runner_cls(config=config)
    with pytest.raises(ValueError, match="num_env_runners must be 0"):
        on_fleet(PPOConfig(), job, redis_url).env_runner_cls(config=config, worker_index=1)


def test_on_fleet_sets_the_jobs_env_and_network_and_refuses_a_job_it_cannot_run(
    job: RolloutJob, redis_url: str
) -> None:
    config = on_fleet(PPOConfig(), job, redis_url)
    assert config.env == "CartPole-v1" and config.num_env_runners == 0 and config.num_envs_per_env_runner == 8
    assert config.model_config["fcnet_hiddens"] == [64, 64] and config.model_config["vf_share_layers"] is False
    multi = RolloutJob.from_file(REPO / "examples" / "multiagent.yaml")
    with pytest.raises(ValueError, match="has a multi-agent job"):
        on_fleet(PPOConfig(), multi, redis_url)
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUTFLEET_REDIS_URL"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "environ", env)
        with pytest.raises(ValueError, match="no Redis URL"):
            on_fleet(PPOConfig(), job)


def test_sample_returns_the_fleets_rows_as_rllib_episodes_and_acknowledges_them_on_the_next(
    job: RolloutJob, redis_url: str
) -> None:
    runner_of_ours, publisher = EnvRunner(job), BatchPublisher(redis_url, job)
    fragments = [runner_of_ours.sample() for _ in range(4)]
    for fragment in fragments:
        publisher.publish(fragment)
    rows = len(fragments[0])
    config = on_fleet(PPOConfig(), job, redis_url)
    runner = config.env_runner_cls(config=config)
    try:
        episodes = runner.sample(num_timesteps=rows + 1)  # whole fragments: two of them
        assert sum(len(e) for e in episodes) == 2 * rows
        assert runner.consumer.lag().pending == 2  # the learner's until it asks for more
        batch = {name: np.concatenate([dict(f)[name] for f in fragments[:2]]) for name in dict(fragments[0])}
        ends = batch["terminateds"] | batch["truncateds"]
        assert sum(e.is_terminated for e in episodes) == int(batch["terminateds"].sum())
        assert sum(e.is_done for e in episodes) == int(ends.sum())
        for episode in episodes:
            obs = np.asarray(episode.get_observations())
            assert len(obs) == len(episode) + 1
            logits = np.asarray(episode.get_extra_model_outputs("action_dist_inputs"))
            logp = np.asarray(episode.get_extra_model_outputs("action_logp"))
            actions = np.asarray(episode.get_actions())
            log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
            np.testing.assert_allclose(log_softmax[np.arange(len(actions)), actions], logp, atol=1e-5)
            if episode.is_terminated:  # CartPole's own rule: past 2.4 or 12 degrees
                assert abs(obs[-1][0]) > 2.4 or abs(obs[-1][2]) > 12 * 2 * np.pi / 360
        metrics = runner.get_metrics()
        assert metrics["num_env_steps_sampled"] == 2 * rows
        assert len(runner.sample(num_timesteps=1)) > 0
        lag = runner.consumer.lag()
        assert (lag.pending, lag.undelivered) == (1, 1)  # the first two acknowledged; one entry read, as asked
    finally:
        runner.stop()
    assert runner.consumer.lag().pending == 0


def test_rllibs_ppo_learns_from_a_fleet_through_rolloutfleet_run() -> None:
    learner = [sys.executable, "-m", "rolloutfleet.examples.rllib_learner", str(CARTPOLE), "--target-return", "150", "--time-limit", "300"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(CARTPOLE), "--no-status", "--", *learner],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ppo-rllib: solved: mean return" in out, out[-3000:]


def test_the_model_config_rllib_builds_from_the_job_is_the_workers_network(job: RolloutJob) -> None:
    config = PPOConfig().environment("CartPole-v1").rl_module(model_config=model_config(job.spec.policy))
    module = config.get_rl_module_spec(env=gym.make("CartPole-v1"), inference_only=False).build()
    ours = {name: tuple(t.shape) for name, t in build_model(job).state_dict().items()}
    theirs = {name: tuple(t.shape) for name, t in module.state_dict().items() if not name.endswith("_const")}
    assert sorted(ours.values()) == sorted(theirs.values()) and len(ours) == len(theirs)


def dqn_job(tmp_path: Path) -> Path:
    manifest = tmp_path / "cartpole-dqn.yaml"
    manifest.write_text(
        "metadata: {name: cartpole-dqn}\n"
        "spec:\n"
        "  replicas: 2\n"
        "  env: {id: CartPole-v1, numEnvs: 4}\n"
        "  policy: {hidden: [64, 64], exploration: {type: epsilonGreedy, epsilon: 0.1}}\n"
        "  sampling: {rolloutFragmentLength: 32, seed: 0}\n"
        "  redis: {maxLen: 8, backpressure: block}\n"
    )
    return manifest


def test_dqns_q_network_is_what_the_workers_act_greedily_on(tmp_path: Path, redis_url: str) -> None:
    from ray.rllib.algorithms.dqn import DQNConfig

    job = RolloutJob.from_file(dqn_job(tmp_path))
    config = on_fleet(DQNConfig().training(dueling=False), job, redis_url)
    runner = config.env_runner_cls(config=config)
    try:
        workers = workers_network(runner, redis_url, job)
        obs = observations("CartPole-v1", 64)
        with torch.no_grad():
            ours = workers(torch.as_tensor(obs))[0].numpy().argmax(-1)
            theirs = runner.module.forward_inference({Columns.OBS: torch.as_tensor(obs)})[Columns.ACTIONS]
        np.testing.assert_array_equal(ours, np.asarray(theirs))  # RLlib's own greedy actions
    finally:
        runner.stop()
    dueling = on_fleet(DQNConfig(), job, redis_url)  # RLlib's default: dueling heads
    with pytest.raises(ModuleRefused, match=r"dueling=True \(the workers' network has one Q head\)"):
        dueling.env_runner_cls(config=dueling)


def test_rllibs_dqn_trains_through_a_fleet_and_its_workers_act_on_what_it_publishes(tmp_path: Path) -> None:
    manifest, out = dqn_job(tmp_path), tmp_path / "result.json"
    learner = [sys.executable, "-m", "rolloutfleet.examples.rllib_learner", str(manifest), "--algo", "dqn",
               "--max-env-steps", "3000", "--time-limit", "240", "--json", str(out)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--no-status", "--", *learner],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.exists(), (done.stdout + done.stderr)[-3000:]
    result = json.loads(out.read_text())
    assert result["env_steps"] >= 3000 and result["module_steps_trained"] > 0, result
    assert result["rows_weights_seq_no"] >= 2, result  # rows sampled with weights the learner published after an update


def test_a_box_action_spaces_gaussian_is_the_same_on_both_sides(redis_url: str) -> None:
    job = RolloutJob.from_file(REPO / "examples" / "pendulum.yaml")
    config = on_fleet(PPOConfig(), job, redis_url)
    assert config.model_config["free_log_std"] is True
    runner = config.env_runner_cls(config=config)
    try:
        with torch.no_grad():
            runner.module.pi.log_std.fill_(-0.7)  # not the initial 0: the parameter itself travels
        workers = workers_network(runner, redis_url, job)
        obs = observations("Pendulum-v1", 16)
        with torch.no_grad():
            ours = workers(torch.as_tensor(obs))[0].numpy()  # mean, then log standard deviation
        np.testing.assert_allclose(ours, rllib_logits(runner.module, obs), rtol=1e-5, atol=1e-6)
        assert np.allclose(ours[:, 1], -0.7)
    finally:
        runner.stop()

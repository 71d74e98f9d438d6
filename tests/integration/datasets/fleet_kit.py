"""Real worker processes for the recording tests, and the facts a recording is judged by:
every row the fleet published (read by a group of the test's own), and CartPole's physics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob


def cartpole_job(name: str, max_len: int = 16) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 2,
                "env": {"id": "CartPole-v1", "numEnvs": 2},
                "sampling": {"rolloutFragmentLength": 40, "seed": 3},
                "redis": {"maxLen": max_len, "backpressure": "block"},
            },
        }
    )


def start_workers(job: RolloutJob, redis_url: str, tmp_path: Path) -> list[subprocess.Popen[bytes]]:
    workers = []
    for index in range(job.spec.replicas):
        config = WorkerConfig(job=job, worker_index=index, num_workers=job.spec.replicas, redis_url=redis_url,
                              metrics_port=free_port())  # fmt: skip
        environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / f"term{index}")}
        workers.append(subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "--log-level=WARNING", "worker"],
                                        env=environ, stderr=subprocess.DEVNULL))  # fmt: skip
    return workers


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def resimulation_error(observations: np.ndarray, actions: np.ndarray, terminations: np.ndarray) -> float:
    """The largest difference between a recorded ``obs[t+1]`` and what gymnasium's CartPole
    gives from ``obs[t]`` and ``actions[t]`` (its state set to the observation); asserts the
    env ends the episode where the recording says it ended."""
    env = CartPoleEnv()
    env.reset(seed=0)
    worst = 0.0
    for t in range(len(actions)):
        env.state = observations[t].astype(np.float64)
        following, reward, terminated, _, _ = env.step(int(actions[t]))
        assert reward == 1.0
        assert bool(terminated) == bool(terminations[t]), f"step {t}: env says terminated={terminated}"
        worst = max(worst, float(np.max(np.abs(following - observations[t + 1]))))
    return worst

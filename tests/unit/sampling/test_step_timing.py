"""The per-vector-step timing breakdown (``timers/...`` of ``get_metrics()``): what it averages
over, and lower bounds the env and the policy set (a sub-env that sleeps, no upper bounds)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.sampling.step_timing import StepTiming

SLEEP_S = 0.002


def make_sleepy(ctx: dict[str, Any]) -> gym.Env[Any, Any]:
    """CartPole whose every step sleeps SLEEP_S (the env's own time, which env_wait must hold)."""
    env = gym.make("CartPole-v1")
    step = env.step

    def sleepy_step(action: Any) -> Any:
        time.sleep(SLEEP_S)
        return step(action)

    env.step = sleepy_step  # type: ignore[method-assign]
    return env


def job(env: dict[str, Any], **sampling: Any) -> RolloutJob:
    spec = {"env": env, "sampling": {"seed": 0, "rolloutFragmentLength": 25, **sampling}}
    return RolloutJob.from_dict({"metadata": {"name": "timing"}, "spec": spec})


def test_the_sums_become_means_per_vector_step() -> None:
    timing = StepTiming()
    assert timing.metrics() == {}
    timing.begin()
    timing.inference_s, timing.env_wait_s, timing.steps = 0.2, 0.5, 100
    timing.end(1.0)
    assert timing.metrics() == pytest.approx(
        {"timers/inference_ms": 2.0, "timers/env_wait_ms": 5.0, "timers/recording_ms": 3.0, "timers/vector_steps": 100}
    )
    timing.begin()
    timing.end(0.5)  # a call that stepped nothing (the batch was already there) keeps the last figures
    assert timing.metrics()["timers/vector_steps"] == 100


@pytest.mark.parametrize("vectorization", ["sync", "vector"])
def test_metrics_report_each_phase_over_the_fragments_vector_steps(vectorization: str) -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 4, "vectorization": vectorization}))
    assert not any(key.startswith("timers/") for key in runner.get_metrics())
    runner.sample()
    runner.sample()
    metrics = runner.get_metrics()
    # truncate mode steps until 4 x 25 rows wait; SAME_STEP (sync) loses no reset rows: exactly 25 steps
    steps = metrics["timers/vector_steps"]
    assert steps == 25 if vectorization == "sync" else steps >= 25
    for phase in ("inference", "env_wait", "recording"):
        assert metrics[f"timers/{phase}_ms"] > 0, phase


def test_env_wait_holds_the_time_the_sub_envs_took() -> None:
    entry = f"{__name__}:make_sleepy"
    runner = EnvRunner(job({"entryPoint": entry, "numEnvs": 2, "vectorization": "sync"}))
    runner.sample()
    metrics = runner.get_metrics()
    assert metrics["timers/env_wait_ms"] >= 2 * SLEEP_S * 1e3  # two sub-envs, one after the other


def test_the_multiagent_runner_reports_no_step_timing() -> None:
    from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
    from tests.unit.sampling.multiagent.test_env_runner import job as ma_job

    runner = MultiAgentEnvRunner(ma_job())
    runner.sample()
    assert not any(key.startswith("timers/") for key in runner.get_metrics())

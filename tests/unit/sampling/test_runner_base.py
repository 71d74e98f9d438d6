"""The one runner contract: single- and multi-agent runners answer the same calls, keyed by
policy id, and a single-agent job is the one policy "default"."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rolloutfleet import Callbacks, RolloutJob
from rolloutfleet.fleet.runner_factory import make_env_runner
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.sampling.runner_base import Runner
from tests.unit.sampling.sampler_test_envs import CounterEnv


def single() -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "single"},
            "spec": {
                "env": {"id": "Pendulum-v1", "numEnvs": 2},
                "policy": {"hidden": [8]},
                "sampling": {"rolloutFragmentLength": 10, "seed": 1, "observationFilter": "meanStd"},
            },
        }
    )


def multi() -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "multi"},
            "spec": {
                "env": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk", "numEnvs": 2},
                "policy": {"hidden": [8]},
                "multiAgent": {
                    "policies": {"even": {}, "odd": {}},
                    "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:even_odd"},
                },
                "sampling": {"rolloutFragmentLength": 10, "seed": 1, "observationFilter": "meanStd"},
            },
        }
    )


CASES = [(single, EnvRunner, {"default"}), (multi, MultiAgentEnvRunner, {"even", "odd"})]


@pytest.mark.parametrize(("make_job", "kind", "policies"), CASES)
def test_both_runners_keep_one_contract_keyed_by_policy(make_job: Any, kind: type, policies: set[str]) -> None:
    runner: Runner[Any] = make_env_runner(make_job())
    assert isinstance(runner, kind) and isinstance(runner, Runner)
    assert runner.policies.keys() == runner.filters.keys() == policies
    assert runner.weights_seq_nos == dict.fromkeys(policies, 0)
    assert runner.get_weights().keys() == runner.get_filters().keys() == policies
    batch = runner.sample()
    assert batch.by_policy().keys() <= policies and sum(len(part) for part in batch.by_policy().values()) > 0
    policy = sorted(policies)[0]
    zeros = {name: np.zeros_like(value) for name, value in runner.get_weights([policy])[policy].items()}
    assert runner.set_weights(policy, zeros, seq_no=5)
    assert not runner.set_weights(policy, zeros, seq_no=5), "a version not newer is ignored"
    assert runner.weights_seq_nos[policy] == 5 and runner.weights_seq_no == 5
    metrics = runner.get_metrics()
    assert metrics[f"policy/{policy}/weights_seq_no"] == 5 and metrics["weights_seq_no"] == 5
    assert metrics["num_env_steps_sampled"] == metrics["num_env_steps_sampled_lifetime"] > 0
    runner.close()


@pytest.mark.parametrize(("make_job", "kind", "policies"), CASES)
def test_state_moves_weights_versions_filters_and_counters(make_job: Any, kind: type, policies: set[str]) -> None:
    job = make_job()
    runner: Runner[Any] = make_env_runner(job)
    runner.sample()
    policy = sorted(policies)[-1]
    runner.set_weights(policy, {k: v + 1 for k, v in runner.get_weights([policy])[policy].items()}, seq_no=3)
    state = runner.get_state()
    assert state.keys() >= {"weights", "weights_seq_nos", "filters", "num_env_steps_sampled_lifetime"}
    assert state["weights"].keys() == state["filters"].keys() == policies
    fresh: Runner[Any] = make_env_runner(job, worker_index=1)
    fresh.set_state(state)
    assert fresh.weights_seq_nos == runner.weights_seq_nos
    for name, value in fresh.get_weights([policy])[policy].items():
        np.testing.assert_array_equal(value, runner.get_weights([policy])[policy][name])
    for policy_id, filt in fresh.filters.items():
        assert filt.stats.count == runner.filters[policy_id].stats.count > 0
    assert fresh.get_state()["num_env_steps_sampled_lifetime"] == state["num_env_steps_sampled_lifetime"] > 0
    runner.close()
    fresh.close()


class StepCounter(Callbacks):
    """Counts each episode's steps in its custom metrics, and its length at the end."""

    def on_episode_step(self, *, runner: Any, env_index: int, **kwargs: Any) -> None:
        custom = runner.custom_metrics(env_index)
        custom["steps"] = custom.get("steps", 0) + 1

    def on_episode_end(self, *, runner: Any, env_index: int, episode_length: int, **kwargs: Any) -> None:
        runner.custom_metrics(env_index)["length_x10"] = 10 * episode_length
        runner.custom_metrics(env_index)["label"] = "not a number"


@pytest.mark.parametrize(("make_job", "kind", "policies"), CASES)
def test_custom_metrics_of_each_episode_reach_get_metrics(make_job: Any, kind: type, policies: set[str]) -> None:
    runner: Runner[Any] = make_env_runner(make_job(), callbacks=StepCounter())
    for _ in range(25):  # Pendulum's episodes are 200 steps: 250 per sub-env
        runner.sample()
    metrics = runner.get_metrics()
    assert metrics["num_episodes"] > 0
    # Same episodes, same window: what the callback counted is what the runner counted.
    assert metrics["custom/length_x10_mean"] == pytest.approx(10 * metrics["episode_len_mean"])
    if kind is EnvRunner:  # multi-agent: on_episode_step once per env step, too
        assert metrics["custom/steps_mean"] == pytest.approx(metrics["episode_len_mean"])
    assert metrics["num_custom_metrics_rejected"] == metrics["num_episodes"]  # the text, once per episode
    assert "custom/label_mean" not in metrics


def test_an_episode_dropped_after_an_env_failure_reports_no_custom_metrics() -> None:
    CounterEnv.failures_left = 1
    job = RolloutJob.from_dict({"metadata": {"name": "t"}, "spec": {
        "env": {"entryPoint": "tests.unit.sampling.sampler_test_envs:make_flaky", "numEnvs": 3, "vectorization": "sync"},
        "sampling": {"rolloutFragmentLength": 12, "seed": 0}}})  # fmt: skip
    runner = EnvRunner(job, callbacks=StepCounter())
    runner.sample()
    metrics = runner.get_metrics()
    assert metrics["num_episodes_dropped"] == 1
    # Every episode that ended had 5 steps; the dropped one had 2 and is not counted.
    assert (metrics["custom/steps_min"], metrics["custom/steps_max"]) == (5.0, 5.0)

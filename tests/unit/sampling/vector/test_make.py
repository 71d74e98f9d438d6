"""Failing envs end: a sub-env that keeps failing, or cannot be reset, ends sampling with
one line naming the env and the error (the worker's exit 3), after exactly the spec's count."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.sampling.env import failures as env_failures
from rolloutfleet.sampling.vector.make import EnvFailed, EnvInterrupted, FailureBudget
from rolloutfleet.spec.job import SpecError

FAILING = "tests.unit.sampling.poison_envs:make_failing_env"


def job(env: dict[str, Any]) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "poison"},
            "spec": {"env": {"numEnvs": 2, **env}, "sampling": {"rolloutFragmentLength": 10, "seed": 0}},
        }
    )


@pytest.mark.parametrize("limit", [1, 3, 5])
def test_a_sub_env_failing_every_step_ends_sampling_after_the_spec_s_count(limit: int) -> None:
    runner = EnvRunner(job({"entryPoint": FAILING, "maxConsecutiveFailures": limit, "config": {"fail_env": 1}}))
    with pytest.raises(EnvFailed) as failed:
        runner.sample()
    message = str(failed.value)
    assert FAILING in message and "sub-env 1" in message and "RuntimeError: physics blew up" in message
    assert "\n" not in message
    assert isinstance(failed.value, SpecError)  # the worker's exit-3 path
    assert runner.env.restarts == limit - 1  # type: ignore[attr-defined]


def test_without_restarts_the_first_failure_ends_sampling() -> None:
    runner = EnvRunner(job({"entryPoint": FAILING, "restartFailedSubEnvs": False, "maxConsecutiveFailures": 5}))
    with pytest.raises(EnvFailed, match="restartFailedSubEnvs is false"):
        runner.sample()
    assert runner.env.restarts == 0  # type: ignore[attr-defined]


def test_a_reset_that_raises_is_one_line_naming_the_env() -> None:
    runner = EnvRunner(job({"entryPoint": FAILING, "config": {"fail": "reset", "fail_env": 1}}))
    with pytest.raises(EnvFailed) as failed:
        runner.sample()
    assert str(failed.value) == (
        f"spec.env.entryPoint '{FAILING}': sub-env 1 reset failed: "
        "ConnectionError: simulator at 10.0.0.9:7000 refused the connection"
    )


def test_an_observation_of_the_wrong_shape_is_a_failure_of_its_sub_env() -> None:
    runner = EnvRunner(job({"entryPoint": "tests.unit.sampling.poison_envs:make_wrong_shape_env"}))
    with pytest.raises(EnvFailed, match=r"sub-env 0 failed 3 times.*shape \(5,\), expected \(2,\)"):
        runner.sample()


def test_successes_in_between_keep_a_flaky_env_alive() -> None:
    budget = FailureBudget(2, "spec.env.id 'X-v0'")
    for _ in range(10):
        budget.failed(0, RuntimeError("flaky"))
        budget.succeeded(0)
    budget.failed(1, RuntimeError("flaky"))  # another sub-env has its own streak
    for progress in range(10):  # the vector env: a failure after progress starts a new streak
        budget.failed(None, RuntimeError("flaky"), progress=progress)
    with pytest.raises(EnvFailed, match="the vector env failed 2 times"):
        budget.failed(None, RuntimeError("flaky"), progress=9)


def test_after_a_stop_request_the_next_failure_ends_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env_failures, "_STOPPING", threading.Event())
    runner = EnvRunner(job({"entryPoint": FAILING, "maxConsecutiveFailures": 1000}))
    env_failures.interrupt_failing_envs()
    with pytest.raises(EnvInterrupted, match="physics blew up"):
        runner.sample()
    assert runner.env.restarts == 0  # type: ignore[attr-defined]

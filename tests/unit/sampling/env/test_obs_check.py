"""An env output that is not an observation of its space (a string from ``reset``) ends
sampling with one line naming the env and what it returned (the worker's exit 3), and
``rolloutfleet validate`` finds it when it builds its sub-env."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

import tests.unit.sampling.poison_envs  # noqa: F401  # registers RolloutFleetNotObsVec-v0
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.sampling.env.obs_check import AgentsObsCheck, obs_problem
from rolloutfleet.sampling.sizes import check_sizes
from rolloutfleet.sampling.vector.make import EnvFailed
from rolloutfleet.spec.job import SpecError

BAD = "tests.unit.sampling.poison_envs:make_not_an_observation_env"
NAME = f"spec.env.entryPoint '{BAD}'"
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


def job(config: dict[str, Any], vectorization: str = "sync") -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "notobs"},
            "spec": {
                "env": {"entryPoint": BAD, "numEnvs": 2, "vectorization": vectorization, "config": config},
                "sampling": {"rolloutFragmentLength": 10, "seed": 0},
            },
        }
    )


def test_obs_problem() -> None:
    assert obs_problem(BOX, np.zeros(2, np.float64)) is None  # castable: float64 -> float32
    assert obs_problem(BOX, [0.5, 1]) is None
    assert obs_problem(BOX, "hello") == "'hello' (str), not an observation of Box(-1.0, 1.0, (2,), float32)"
    assert "of shape (3,), expected (2,)" in str(obs_problem(BOX, np.zeros(3)))
    assert "['a', 'b'] (list)" in str(obs_problem(BOX, ["a", "b"]))
    assert obs_problem(BOX, None) is not None and obs_problem(BOX, {"x": 1}) is not None
    assert obs_problem(spaces.Discrete(3), 2) is None and obs_problem(spaces.Discrete(3), "2") is not None
    mixed = spaces.Dict({"a": BOX, "b": spaces.Discrete(2)})
    assert obs_problem(mixed, {"a": np.zeros(2), "b": 1}) is None
    assert "'b'" in str(obs_problem(mixed, {"a": np.zeros(2), "b": "x"}))
    assert "'b'" in str(obs_problem(mixed, {"a": np.zeros(2)}))
    assert obs_problem(spaces.Tuple((BOX,)), (np.zeros(2),)) is None
    assert obs_problem(spaces.Tuple((BOX,)), (np.zeros(2), 1)) is not None


def test_the_per_agent_check_says_what_obs_problem_says_and_asks_each_space_once() -> None:
    """Its shortcut for numeric arrays of the space's shape changes no verdict."""
    agent_spaces: dict[str, spaces.Space[Any]] = {
        "box": BOX,
        "discrete": spaces.Discrete(3),
        "multi": spaces.MultiDiscrete([2, 3]),
        "bits": spaces.MultiBinary(3),
        "dict": spaces.Dict({"pos": BOX}),
    }
    values = [
        np.zeros(2, np.float32), np.zeros(2, np.int64), np.zeros(3, np.float32), np.array(1), np.array([1, 2]),
        np.zeros(3, bool), np.array(["a", "b"]), np.array([None, None], dtype=object), [0.0, 1.0], 2, "x",
        {"pos": np.zeros(2, np.float32)}, {"pos": "x"},
    ]  # fmt: skip
    asked: list[str] = []
    check = AgentsObsCheck(lambda agent: asked.append(agent) or agent_spaces[agent])
    for value in values:
        for agent, space in agent_spaces.items():
            expected = obs_problem(space, value)
            assert check({agent: value}) == (None if expected is None else f"for agent {agent!r} {expected}")
    assert sorted(asked) == sorted(agent_spaces)  # each space looked up once


def test_a_string_from_reset_is_one_line_naming_the_env_and_what_it_returned() -> None:
    runner = EnvRunner(job({"when": "reset"}))
    with pytest.raises(EnvFailed) as failed:
        runner.sample()
    assert str(failed.value) == (
        f"{NAME}: sub-env 0 reset returned 'hello' (str), not an observation of Box(-1.0, 1.0, (2,), float32)"
    )
    assert isinstance(failed.value, SpecError)  # the worker's exit-3 path


def test_strings_of_the_right_shape_from_step_end_sampling_naming_them() -> None:
    runner = EnvRunner(job({"when": "step", "value": ["1", "x"]}))
    with pytest.raises(EnvFailed) as failed:
        runner.sample()
    message = str(failed.value)
    assert message.startswith(f"{NAME}: sub-env 0 failed 3 times in a row") and "['1', 'x'] (list)" in message
    assert "\n" not in message


def test_async_env_processes_say_the_same() -> None:
    runner = EnvRunner(job({"when": "step"}, vectorization="async"))
    with pytest.raises(EnvFailed) as failed:
        runner.sample()
    assert "'hello' (str), not an observation of Box" in str(failed.value)


def test_validate_builds_its_sub_env_and_finds_it() -> None:
    with pytest.raises(SpecError) as failed:
        check_sizes(job({"when": "reset"}))
    assert str(failed.value) == (
        f"{NAME}: reset returned 'hello' (str), not an observation of Box(-1.0, 1.0, (2,), float32)"
    )
    check_sizes(job({"when": "step"}))  # validate resets its sub-env; it does not step it


def vector_job(when: str, value: Any = "hello") -> RolloutJob:
    """An env's own vector implementation (``vectorization: vector``) returning ``value``."""
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "notobsvec"},
            "spec": {
                "env": {"id": "RolloutFleetNotObsVec-v0", "numEnvs": 2, "vectorization": "vector",
                        "maxConsecutiveFailures": 2, "config": {"when": when, "value": value}},
                "sampling": {"rolloutFragmentLength": 10, "seed": 0},
            },
        }
    )  # fmt: skip


VEC_NAME = "spec.env.id 'RolloutFleetNotObsVec-v0'"
VEC_BOX = "Box(-1.0, 1.0, (2, 2), float32)"


def test_a_vector_env_whose_reset_returns_no_observations_is_one_line() -> None:
    with pytest.raises(EnvFailed) as failed:
        EnvRunner(vector_job("reset")).sample()
    assert (
        str(failed.value)
        == f"{VEC_NAME}: the vector env's reset returned 'hello' (str), not an observation of {VEC_BOX}"
    )


def test_a_vector_env_whose_step_returns_rows_of_another_shape_fails_as_a_vector_env_failure() -> None:
    with pytest.raises(EnvFailed) as failed:
        EnvRunner(vector_job("step", [[0.0] * 3] * 2)).sample()  # rows of 3 where the space has 2
    message = str(failed.value)
    assert message.startswith(VEC_NAME) and "failed 2 times in a row" in message, message
    assert "the vector env's step returned an observation of shape (2, 3), expected (2, 2)" in message
    assert "\n" not in message


def test_validate_resets_the_vector_env_it_builds_and_finds_it() -> None:
    with pytest.raises(SpecError) as failed:
        check_sizes(vector_job("reset"))  # it builds one sub-env: a batch of 1
    one = VEC_BOX.replace("(2, 2)", "(1, 2)")
    assert (
        str(failed.value) == f"{VEC_NAME}: the vector env's reset returned 'hello' (str), not an observation of {one}"
    )


def multiagent_job(when: str) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "notobsma"},
            "spec": {
                "env": {"entryPoint": MA_BAD, "numEnvs": 2, "maxConsecutiveFailures": 2, "config": {"when": when}},
                "multiAgent": {"policies": {"p": {}}, "policyMapping": {"rules": [{"regex": ".*", "policy": "p"}]}},
                "sampling": {"rolloutFragmentLength": 10, "seed": 0},
            },
        }
    )


MA_BAD = "tests.unit.sampling.multiagent_test_envs:make_not_obs_walk"
MA_BOX = "Box(-1000.0, 1000.0, (3,), float32)"


def test_a_multi_agent_reset_that_returns_no_observation_names_the_agent() -> None:
    from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

    with pytest.raises(EnvFailed) as failed:
        MultiAgentEnvRunner(multiagent_job("reset")).sample()
    assert str(failed.value) == (
        f"spec.env.entryPoint: reset returned for agent 'a1' 'hello' (str), not an observation of {MA_BOX}"
    )


def test_a_multi_agent_step_that_returns_no_observation_is_a_sub_env_failure() -> None:
    from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

    with pytest.raises(EnvFailed) as failed:
        MultiAgentEnvRunner(multiagent_job("step")).sample()
    message = str(failed.value)
    assert "failed 2 times in a row" in message and "\n" not in message, message
    assert f"step returned for agent 'a1' 'hello' (str), not an observation of {MA_BOX}" in message

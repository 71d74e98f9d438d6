"""spec.env.wrappers: each mistake is one line naming the field; the table of arguments is
gymnasium's own (checked against the wrappers' signatures)."""

from __future__ import annotations

import inspect
from typing import Any, get_args

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.wrappers_spec import ARGS, WRAPPERS, WrapperName


def load(env: dict[str, Any]) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": {"env": {"id": "ALE/Pong-v5", **env}}})


def test_a_wrapper_list_loads_in_order_with_its_arguments() -> None:
    wrappers: list[dict[str, Any]] = [
        {"name": "AtariPreprocessing", "args": {"frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": True}},
        {"name": "FrameStackObservation", "args": {"stack_size": 4, "padding_type": "zero"}},
        {"name": "ClipReward", "args": {"min_reward": -1, "max_reward": 1.0}},
        {"name": "ResizeObservation", "args": {"shape": [64, 48]}},
        {"name": "FlattenObservation"},
    ]
    job = load({"wrappers": wrappers})
    assert [w.name for w in job.spec.env.wrappers] == [w["name"] for w in wrappers]
    assert job.spec.env.wrappers[1].args == {"stack_size": 4, "padding_type": "zero"}
    assert job.spec.env.wrappers[4].args == {}
    assert RolloutJob.from_dict(job.to_dict()) == job  # round-trips through the manifest form


@pytest.mark.parametrize(
    ("wrapper", "where", "says"),
    [
        ({"name": "FrameStack", "args": {"stack_size": 4}}, "spec.env.wrappers[0].name", "must be one of"),
        ({"name": "TimeLimit", "args": {"max_steps": 5}}, "spec.env.wrappers[0].args.max_steps", "takes no argument"),
        ({"name": "TimeLimit"}, "spec.env.wrappers[0].args", "TimeLimit needs max_episode_steps"),
        ({"name": "FrameStackObservation", "args": {"stack_size": 0}}, "args.stack_size", "must be >= 1"),
        ({"name": "FrameStackObservation", "args": {"stack_size": "4"}}, "args.stack_size", "must be an integer"),
        (
            {"name": "FrameStackObservation", "args": {"stack_size": 2, "padding_type": "same"}},
            "args.padding_type",
            "one of",
        ),
        ({"name": "AtariPreprocessing", "args": {"grayscale_obs": 1}}, "args.grayscale_obs", "true or false"),
        ({"name": "ResizeObservation", "args": {"shape": [84]}}, "args.shape", "two integers"),
        ({"name": "NormalizeReward", "args": {"gamma": 1.5}}, "args.gamma", "must be <= 1"),
        ({"name": "NormalizeObservation", "args": {"epsilon": 0}}, "args.epsilon", "must be > 0"),
        ({"name": "ClipReward"}, "spec.env.wrappers[0].args", "min_reward, max_reward or both"),
        ({"name": "FlattenObservation", "args": {"x": 1}}, "args.x", "it takes: none"),
        (
            {"name": "TimeLimit", "args": {"max_episode_steps": 5}, "kwargs": {}},
            "spec.env.wrappers[0].kwargs",
            "unknown",
        ),
    ],
)
def test_each_mistake_is_one_line_naming_the_field(wrapper: dict[str, Any], where: str, says: str) -> None:
    with pytest.raises(SpecError) as error:
        load({"vectorization": "sync", "wrappers": [{"name": "ClipAction"}, wrapper][1:]})
    message = str(error.value)
    assert "\n" not in message and ";" not in message
    assert where in message and says in message, message


@pytest.mark.parametrize("vectorization", ["vector", "envpool"])
def test_wrappers_need_single_sub_envs(vectorization: str) -> None:
    with pytest.raises(SpecError, match=rf"^spec\.env\.wrappers: .*'{vectorization}'.*use 'sync' or 'async'"):
        load({"vectorization": vectorization, "wrappers": [{"name": "TimeLimit", "args": {"max_episode_steps": 9}}]})


def test_envpool_needs_an_id() -> None:
    with pytest.raises(SpecError, match=r"^spec\.env: vectorization 'envpool' needs an env 'id'"):
        RolloutJob.from_dict(
            {"metadata": {"name": "w"}, "spec": {"env": {"entryPoint": "m:f", "vectorization": "envpool"}}}
        )


def test_at_most_16_wrappers() -> None:
    with pytest.raises(SpecError, match=r"^spec\.env\.wrappers: .*at most 16"):
        load({"wrappers": [{"name": "ClipAction"}] * 17})


def test_the_table_is_gymnasium_s_signatures() -> None:
    """Every name is a class of gymnasium.wrappers; its required arguments are those without a
    default and every argument we accept is one it takes (gymnasium's, not our memory of it)."""
    import gymnasium.wrappers

    assert set(get_args(WrapperName)) == set(WRAPPERS)
    for name, takes in WRAPPERS.items():
        parameters = dict(inspect.signature(getattr(gymnasium.wrappers, name)).parameters)
        parameters.pop("env")
        required = {p for p, param in parameters.items() if param.default is inspect.Parameter.empty}
        assert set(takes.required) == required, name
        assert set(takes.all) <= set(parameters), name
    assert set(ARGS) == {arg for takes in WRAPPERS.values() for arg in takes.all}


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ({"wrappers": [{"name": "ClipAction"}]}, r"^spec\.env\.wrappers: wrap single-agent envs only"),
        ({"vectorization": "envpool"}, r"^spec\.env\.vectorization: 'envpool' steps single-agent envs only"),
    ],
)
def test_multi_agent_jobs_refuse_single_agent_env_options(env: dict[str, Any], where: str) -> None:
    multi_agent = {"policies": {"red": {}}, "policyMapping": {"entryPoint": "m:f"}}
    spec = {"env": {"id": "pettingzoo.mpe.simple_tag_v3", **env}, "multiAgent": multi_agent}
    with pytest.raises(SpecError, match=where):
        RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": spec})

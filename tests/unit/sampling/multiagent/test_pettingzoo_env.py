"""The adapter: both APIs' episode ends and spaces; PettingZoo's own API test on the example env."""

from __future__ import annotations

from typing import Any

import pytest
from gymnasium import spaces

from rolloutfleet.examples.team_tag import TeamTag, TeamTagDict
from rolloutfleet.sampling.multiagent.pettingzoo_env import MultiAgentEnvAdapter, make_multiagent_envs
from rolloutfleet.sampling.vector.make import EnvContext
from rolloutfleet.spec.job import EnvSpec, SpecError
from tests.unit.sampling.multiagent_test_envs import OBS_SPACE, WalkEnv


@pytest.mark.parametrize("pettingzoo", [False, True])
def test_episode_end_from_all_or_from_no_agents_left(pettingzoo: bool) -> None:
    env = MultiAgentEnvAdapter(WalkEnv({"length": 2, "pettingzoo": pettingzoo}))
    obs = env.reset(seed=0)
    assert sorted(obs) == ["a0", "a1"] and env.observation_space("a0") == OBS_SPACE
    first = env.step(dict.fromkeys(obs, 1))
    assert not (first.episode_terminated or first.episode_truncated)
    assert "__all__" not in first.terminateds
    last = env.step(dict.fromkeys(obs, 1))
    assert last.episode_truncated and not last.episode_terminated


def test_team_tag_passes_pettingzoos_parallel_api_test() -> None:
    from pettingzoo.test import parallel_api_test

    parallel_api_test(TeamTag({"late_blues": 1, "join_step": 3}), num_cycles=200)


def test_rllib_style_all_key_ends_the_episode() -> None:
    env = MultiAgentEnvAdapter(TeamTagDict({"max_steps": 1}))
    obs = env.reset(seed=1)
    step = env.step(dict.fromkeys(obs, 0))
    assert step.episode_truncated and "__all__" not in step.truncateds


def test_spaces_from_a_dict_space_or_one_shared_space() -> None:
    class DictSpaces:
        observation_space = spaces.Dict({"x": spaces.Discrete(2)})
        action_space = spaces.Discrete(3)

        def reset(self, **kw: Any) -> Any:
            return {"x": 0}, {}

        def step(self, actions: Any) -> Any:
            return {}, {}, {"__all__": True}, {"__all__": False}, {}

    env = MultiAgentEnvAdapter(DictSpaces())
    assert env.possible_agents == ["x"]
    assert env.observation_space("x") == spaces.Discrete(2) and env.action_space("x") == spaces.Discrete(3)


def test_not_a_multi_agent_env_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="has no reset"):
        MultiAgentEnvAdapter(object(), "spec.env.entryPoint")
    with pytest.raises(SpecError, match=r"spec\.env\.id: .*parallel_env"):
        make_multiagent_envs(EnvSpec(id="no_such_module_xyz"), 0, 1)


def test_a_pettingzoo_aec_env_is_stepped_turn_by_turn() -> None:
    from pettingzoo.utils.conversions import parallel_to_aec

    from tests.unit.sampling.multiagent_test_envs import make_pettingzoo_walk

    aec = parallel_to_aec(make_pettingzoo_walk(EnvContext({"length": 3}, 0, 0, 1)))
    env = MultiAgentEnvAdapter(aec)
    assert env.turn_based
    obs = env.reset(seed=0)
    turns = []
    while True:
        assert len(obs) == 1  # one agent acts per step
        turns.append(next(iter(obs)))
        result = env.step(dict.fromkeys(obs, 2))
        if result.episode_terminated or result.episode_truncated:
            break
        obs = {agent: o for agent, o in result.obs.items() if not result.truncateds[agent]}
    # 3 parallel steps of 2 agents are 6 turns, in the env's own order; then both are truncated.
    assert turns == ["a0", "a1"] * 3
    assert result.episode_truncated and result.truncateds == {"a0": True, "a1": True}

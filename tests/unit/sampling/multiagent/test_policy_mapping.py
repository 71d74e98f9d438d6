"""PolicyMapper: rules (prefix, regex, default) and entry points, with errors naming the field."""

from __future__ import annotations

import pytest

from rolloutfleet.sampling.multiagent.policy_mapping import EpisodeInfo, PolicyMapper
from rolloutfleet.spec.job import MultiAgentSpec, SpecError

EPISODE = EpisodeInfo(env_index=0, eps_id=7, worker_index=0)


def mapper(**mapping: object) -> PolicyMapper:
    return PolicyMapper(MultiAgentSpec.model_validate({"policies": {"red": {}, "blue": {}}, "policyMapping": mapping}))


def test_rules_first_match_wins_then_default() -> None:
    rules = mapper(
        rules=[{"prefix": "red_", "policy": "red"}, {"regex": r"^(blue|red)_\d+$", "policy": "blue"}], default="red"
    )
    assert rules("red_1", EPISODE) == "red"
    assert rules("blue_12", EPISODE) == "blue"
    assert rules("blue_x", EPISODE) == "red"  # regex must match the whole id: falls to the default
    assert not rules.per_episode


def test_rules_without_default_name_the_agent() -> None:
    with pytest.raises(SpecError, match=r"spec\.multiAgent\.policyMapping\.rules: no rule matches agent 'green_0'"):
        mapper(rules=[{"prefix": "red_", "policy": "red"}])("green_0", EPISODE)


def test_entry_point_gets_agent_and_episode() -> None:
    by_function = mapper(entryPoint="rolloutfleet.examples.team_tag:policy_for")
    assert by_function("red_0", EPISODE) == "red" and by_function("blue_3", EPISODE) == "blue"
    assert by_function.per_episode


def test_entry_point_returning_an_unknown_id_names_agent_and_policy() -> None:
    bad = PolicyMapper(
        MultiAgentSpec.model_validate(
            {
                "policies": {"even": {}, "odd": {}},
                "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:unknown_policy"},
            }
        )
    )
    assert bad("a0", EPISODE) == "even"
    with pytest.raises(SpecError, match=r"entryPoint: .* mapped agent 'a1' to policy 'green'.*\(even, odd\)"):
        bad("a1", EPISODE)


def test_entry_point_that_cannot_be_imported_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.multiAgent\.policyMapping\.entryPoint: cannot import"):
        mapper(entryPoint="no_such_module_xyz:fn")

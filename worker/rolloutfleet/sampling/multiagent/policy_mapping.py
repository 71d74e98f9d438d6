"""Which policy acts for an agent: ``spec.multiAgent.policyMapping`` made callable (pure).

Rules need no code and map an agent the same way in every episode, so their answer is
cached per agent id. An entry point ``fn(agent_id, episode)`` may choose per episode (self
-play against a random past self, say); the runner calls the mapper once per agent and
episode and keeps the answer for the rest of the episode::

    >>> from rolloutfleet.spec.job import MultiAgentSpec
    >>> spec = MultiAgentSpec.model_validate({
    ...     "policies": {"red": {}, "blue": {}},
    ...     "policyMapping": {"rules": [{"prefix": "red_", "policy": "red"}], "default": "blue"}})
    >>> mapper = PolicyMapper(spec)
    >>> mapper("red_0", EpisodeInfo(0, 1, 0)), mapper("ref", EpisodeInfo(0, 1, 0))
    ('red', 'blue')

A mapping to a policy id that ``spec.multiAgent.policies`` lacks is a :class:`SpecError`
naming the agent and the policy, raised at the first step that meets that agent.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import MultiAgentSpec, PolicySpec, RolloutJob, SpecError

if TYPE_CHECKING:
    from gymnasium import spaces

    from rolloutfleet.sampling.multiagent.pettingzoo_env import MultiAgentEnvAdapter

RULES_FIELD = "spec.multiAgent.policyMapping.rules"
ENTRY_POINT_FIELD = "spec.multiAgent.policyMapping.entryPoint"


@dataclass(frozen=True)
class EpisodeInfo:
    """What a mapping function is told about the episode an agent is in."""

    env_index: int
    """The sub-env (0 .. numEnvs - 1) of this worker."""
    eps_id: int
    """The episode's id, as in the batches' ``eps_id`` column."""
    worker_index: int


class PolicyMapper:
    """``mapper(agent_id, episode) -> policy_id``, checked against the job's policies."""

    def __init__(self, spec: MultiAgentSpec) -> None:
        self.policies = tuple(spec.policies)
        mapping = spec.policy_mapping
        self._fn: Callable[[Any, EpisodeInfo], Any] | None = None
        self._rules: list[tuple[Callable[[str], bool], str]] = []
        self._default = mapping.default
        self._cache: dict[Any, str] = {}
        if mapping.entry_point is not None:
            self._entry_point = mapping.entry_point
            self._fn = load_entry_point(mapping.entry_point, ENTRY_POINT_FIELD)
        for rule in mapping.rules or ():
            if rule.prefix is not None:
                self._rules.append((_prefix_matcher(rule.prefix), rule.policy))
            else:
                assert rule.regex is not None  # MappingRule's validator: exactly one of the two
                self._rules.append((_regex_matcher(rule.regex), rule.policy))

    @property
    def per_episode(self) -> bool:
        """Whether the answer may change from episode to episode (an entry point)."""
        return self._fn is not None

    def __call__(self, agent_id: Any, episode: EpisodeInfo) -> str:
        if self._fn is None:
            cached = self._cache.get(agent_id)
            if cached is None:
                cached = self._cache[agent_id] = self._by_rules(agent_id)
            return cached
        try:
            policy_id = self._fn(agent_id, episode)
        except Exception as exc:  # noqa: BLE001 - the user's function: one line naming it and the agent
            raise SpecError(
                f"{ENTRY_POINT_FIELD}: {self._entry_point}({agent_id!r}, episode) raised {type(exc).__name__}: {exc}"
            ) from None
        if policy_id not in self.policies:
            raise SpecError(
                f"{ENTRY_POINT_FIELD}: {self._entry_point} mapped agent {agent_id!r} to policy {policy_id!r}, "
                f"which spec.multiAgent.policies does not have ({', '.join(self.policies)})"
            )
        return str(policy_id)

    def _by_rules(self, agent_id: Any) -> str:
        text = str(agent_id)
        for matches, policy_id in self._rules:
            if matches(text):
                return policy_id
        if self._default is not None:
            return self._default
        raise SpecError(
            f"{RULES_FIELD}: no rule matches agent {text!r} and spec.multiAgent.policyMapping.default is not set"
        )


def multi_agent_spec(job: RolloutJob) -> MultiAgentSpec:
    if job.spec.multi_agent is None:
        raise SpecError(
            "spec.multiAgent: not set; this job is single-agent (use rolloutfleet.sampling.env_runner.EnvRunner)"
        )
    return job.spec.multi_agent


def policy_specs(job: RolloutJob) -> dict[str, PolicySpec]:
    """Policy id -> ``spec.policy`` with that policy's overrides applied."""
    multi = multi_agent_spec(job)
    return {policy_id: overrides.apply(job.spec.policy) for policy_id, overrides in multi.policies.items()}


def policy_seed_path(policy_id: str) -> int:
    """A stable number per policy id, so each policy's seeds differ and do not depend on order."""
    return zlib.crc32(policy_id.encode("utf-8"))


def policy_spaces(
    env: MultiAgentEnvAdapter, mapper: PolicyMapper, worker_index: int, policy_ids: Iterable[str]
) -> dict[str, tuple[spaces.Space[Any], spaces.Space[Any]]]:
    """Policy id -> (observation space, action space) of the env's possible agents mapped to it
    (asked for a probe episode of sub-env 0); when none maps to a policy and all agents share
    their spaces, those."""
    probe = EpisodeInfo(env_index=0, eps_id=0, worker_index=worker_index)
    found: dict[str, tuple[spaces.Space[Any], spaces.Space[Any]]] = {}
    agent_spaces = []
    for agent in env.possible_agents:
        pair = (env.observation_space(agent), env.action_space(agent))
        agent_spaces.append(pair)
        found.setdefault(mapper(agent, probe), pair)
    shared = agent_spaces[0] if agent_spaces and all(p == agent_spaces[0] for p in agent_spaces) else None
    result = {}
    for policy_id in policy_ids:
        known = found.get(policy_id, shared)
        if known is None:
            raise SpecError(
                f"spec.multiAgent.policies.{policy_id}: no agent of the env maps to this policy "
                f"(possible agents: {', '.join(map(str, env.possible_agents)) or 'none declared'}), so its "
                "observation and action spaces are unknown; give the env possible_agents or fix the mapping"
            )
        result[policy_id] = known
    return result


def _prefix_matcher(prefix: str) -> Callable[[str], bool]:
    return lambda text: text.startswith(prefix)


def _regex_matcher(regex: str) -> Callable[[str], bool]:
    pattern = re.compile(regex)
    return lambda text: pattern.fullmatch(text) is not None

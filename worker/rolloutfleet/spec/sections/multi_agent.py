"""``spec.multiAgent``: several policies in one multi-agent env and which agent acts with which."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rolloutfleet.spec.fields import check_entry_point
from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.sections.policy_spec import PolicyOverrides

# Policy ids are parts of Redis keys and .npz member names: no braces, slashes or colons.
_POLICY_ID = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")


class MappingRule(_Model):
    """Agents whose id starts with ``prefix`` (or fully matches ``regex``) act with ``policy``."""

    prefix: str | None = None
    regex: str | None = None
    policy: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _exactly_one_pattern(self) -> MappingRule:
        if (self.prefix is None) == (self.regex is None):
            raise ValueError("give exactly one of 'prefix' or 'regex'")
        return self


class PolicyMappingSpec(_Model):
    """Which policy acts for an agent: a function, or a rule table that needs no code."""

    entry_point: str | None = None
    """``pkg.module:fn``, called as ``fn(agent_id, episode) -> policy_id`` once per agent and episode."""
    rules: list[MappingRule] | None = None
    """Tried in order; the first rule matching the agent id wins."""
    default: str | None = None
    """Policy for agents no rule matches (rules only); without it such an agent is an error."""

    @field_validator("entry_point")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return check_entry_point(value)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> PolicyMappingSpec:
        if (self.entry_point is None) == (self.rules is None):
            raise ValueError("give exactly one of 'entryPoint' (pkg.module:fn) or 'rules'")
        if self.entry_point is not None and self.default is not None:
            raise _SubfieldError("default", "only applies to 'rules'; an entryPoint function decides alone")
        if self.rules is not None and not self.rules:
            raise _SubfieldError("rules", "must hold at least one rule")
        return self


DEFAULT_MAX_EPISODE_STEPS = 100_000
"""``spec.multiAgent.maxEpisodeSteps`` unless given (the CRD has the same default)."""


class MultiAgentSpec(_Model):
    """Several policies acting in one multi-agent env (PettingZoo Parallel API or RLlib-style dicts)."""

    policies: dict[str, PolicyOverrides]
    """Policy id -> overrides of ``spec.policy`` (``{}``: the defaults). Ids become Redis key parts."""
    policy_mapping: PolicyMappingSpec
    policies_to_train: list[str] | None = None
    """Policies whose experience is published (default: all); the others act but are not published."""
    count_steps_by: Literal["env_steps", "agent_steps"] = "env_steps"
    """What ``rolloutFragmentLength`` counts: env steps, or agent steps (one per acting agent)."""
    max_episode_steps: int = Field(default=DEFAULT_MAX_EPISODE_STEPS, ge=1)
    """An episode still running after this many env steps is truncated (gymnasium ``TimeLimit``'s
    ``max_episode_steps``; for a turn-based AEC env one env step is one move): every agent's
    last row ``truncateds``, counted in ``num_episodes_truncated_by_max_steps``, and the next
    episode starts. Bounds games that never end; an env's own turn limit ends them first."""

    @field_validator("policies")
    @classmethod
    def _policy_ids(cls, value: dict[str, PolicyOverrides]) -> dict[str, PolicyOverrides]:
        if not value:
            raise ValueError("must name at least one policy")
        for policy_id in value:
            if not _POLICY_ID.match(policy_id):
                raise ValueError(
                    f"policy id {policy_id!r} must start with a letter and hold only letters, digits, '-', '_' "
                    "or '.' (at most 64 characters): it becomes part of Redis key names"
                )
        return value

    @model_validator(mode="after")
    def _known_policy_ids(self) -> MultiAgentSpec:
        known = ", ".join(self.policies)

        def check(path: str, policy_id: str) -> None:
            if policy_id not in self.policies:
                raise _SubfieldError(path, f"unknown policy id {policy_id!r}; spec.multiAgent.policies has {known}")

        for index, rule in enumerate(self.policy_mapping.rules or []):
            check(f"policyMapping.rules[{index}].policy", rule.policy)
        if self.policy_mapping.default is not None:
            check("policyMapping.default", self.policy_mapping.default)
        for index, policy_id in enumerate(self.policies_to_train or []):
            check(f"policiesToTrain[{index}]", policy_id)
        return self

    @property
    def trained_policies(self) -> list[str]:
        """The ids in ``policiesToTrain``, or every policy id."""
        return list(self.policies) if self.policies_to_train is None else list(dict.fromkeys(self.policies_to_train))

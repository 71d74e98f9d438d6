"""The RolloutJob manifest: one typed model shared by the worker, the CLI and the operator.

This package imports neither torch nor gymnasium (nor any client library), so the
operator's image can validate manifests without them. Field names follow the
Kubernetes convention (camelCase in YAML, snake_case in Python)::

    job = RolloutJob.from_file("examples/cartpole.yaml")
    job.spec.env.num_envs          # 8

Anything wrong raises one :class:`SpecError` whose message names the field, e.g.
``spec.sampling.batchMode: must be one of 'truncate_episodes', 'complete_episodes'``.
Each section of the spec is a module of its own (``env_spec``, ``policy_spec``,
``multi_agent``, ``sampling_spec``, ``redis_spec``, ``resources``, ...); this one holds the
manifest and its top-level spec, and re-exports the sections' public names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from rolloutfleet.spec.error_lines import describe_errors
from rolloutfleet.spec.fields import MAX_LAYER_WIDTH, MAX_LAYERS
from rolloutfleet.spec.manifest_yaml import load_documents, yaml_problem
from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.model_base import plain_json
from rolloutfleet.spec.sections.autoscaling import AutoscalingSpec, check_autoscaling
from rolloutfleet.spec.sections.disruption import DisruptionSpec, PodTemplateSpec
from rolloutfleet.spec.sections.env_spec import MAX_NUM_ENVS, EnvSpec, check_external
from rolloutfleet.spec.sections.evaluation import EvaluationSpec
from rolloutfleet.spec.sections.league_spec import LeagueSpec
from rolloutfleet.spec.sections.multi_agent import (
    DEFAULT_MAX_EPISODE_STEPS,
    MappingRule,
    MultiAgentSpec,
    PolicyMappingSpec,
)
from rolloutfleet.spec.sections.network_spec import NetworkSpec
from rolloutfleet.spec.sections.placement import check_env_vars, check_tolerations
from rolloutfleet.spec.sections.policy_spec import (
    MAX_STATE_SIZE,
    PolicyOverrides,
    PolicySpec,
    RecurrentSpec,
    check_recurrent,
)
from rolloutfleet.spec.sections.redis_spec import PasswordSecretRef, RedisSpec
from rolloutfleet.spec.sections.resources import ResourcesSpec, parse_quantity
from rolloutfleet.spec.sections.sampling_spec import MAX_FRAGMENT_LENGTH, SamplingSpec

__all__ = [
    "API_VERSION",
    "DEFAULT_MAX_EPISODE_STEPS",
    "KIND",
    "MAX_FRAGMENT_LENGTH",
    "MAX_LAYERS",
    "MAX_LAYER_WIDTH",
    "MAX_NUM_ENVS",
    "MAX_STATE_SIZE",
    "EnvSpec",
    "MappingRule",
    "MultiAgentSpec",
    "ObjectMeta",
    "PasswordSecretRef",
    "PolicyMappingSpec",
    "PolicyOverrides",
    "PolicySpec",
    "RecurrentSpec",
    "RedisSpec",
    "ResourcesSpec",
    "RestartPolicySpec",
    "RolloutJob",
    "RolloutJobSpec",
    "SamplingSpec",
    "SpecError",
    "check_external",
    "check_recurrent",
    "parse_quantity",
]

API_VERSION = "rolloutfleet.io/v1alpha1"
KIND = "RolloutJob"

# RFC 1123 label: what Kubernetes accepts as a name we later embed in pod names.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SpecError(ValueError):
    """A manifest is invalid. The message names every offending field."""


class RestartPolicySpec(_Model):
    """How failed workers are replaced (the operator and the local fleet share these semantics)."""

    max_restarts: int = Field(default=1000, ge=0)
    backoff_seconds: float = Field(default=1.0, ge=0)
    backoff_limit_seconds: float = Field(default=60.0, ge=0)


class RolloutJobSpec(_Model):
    replicas: int = Field(default=1, ge=0)
    env: EnvSpec
    policy: PolicySpec = Field(default_factory=PolicySpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    multi_agent: MultiAgentSpec | None = None
    """Several policies and a mapping of agents to them; absent for single-agent envs."""
    redis: RedisSpec = Field(default_factory=RedisSpec)
    restart_policy: RestartPolicySpec = Field(default_factory=RestartPolicySpec)
    suspend: bool = False
    # Pod placement; passed through by the operator, ignored by a local run.
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] | None = None
    topology_spread_constraints: list[dict[str, Any]] | None = None
    """core/v1 TopologySpreadConstraints of the worker pods. Unset: the operator spreads
    them over nodes (``kubernetes.io/hostname``, ``ScheduleAnyway``), so that one node's loss
    does not take the whole fleet; ``[]``: none."""
    priority_class_name: str | None = None
    service_account_name: str | None = None
    env_vars: list[dict[str, Any]] = Field(default_factory=list, alias="extraEnv")
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    """``metadata.labels`` / ``metadata.annotations`` of the worker pods (:mod:`rolloutfleet.spec.sections.disruption`)."""
    disruption: DisruptionSpec = Field(default_factory=DisruptionSpec)
    """The PodDisruptionBudget's ``maxUnavailable`` and ``nodeLossSeconds`` (:mod:`rolloutfleet.spec.sections.disruption`)."""
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    """``egress``: what the workers may reach beyond Redis and DNS (:mod:`rolloutfleet.spec.sections.network_spec`)."""
    autoscaling: AutoscalingSpec | None = None
    """``{minReplicas, maxReplicas, ...}``: the number of workers follows the learner's appetite
    (:mod:`rolloutfleet.spec.sections.autoscaling`); ``replicas`` is then only the size to start from."""
    evaluation: EvaluationSpec | None = None
    """``{workers, episodes, explore, seed, ...}``: evaluation workers that play whole episodes of
    each new weights version and publish its return (:mod:`rolloutfleet.spec.sections.evaluation`)."""
    league: LeagueSpec | None = None
    """``{opponent, cachedPolicies, planRefreshSeconds}``: a multi-agent job's opponent seats
    play league snapshots, episode by episode (:mod:`rolloutfleet.spec.sections.league_spec`)."""

    @field_validator("tolerations")
    @classmethod
    def _typed_tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return check_tolerations(value)

    @field_validator("env_vars")
    @classmethod
    def _named_env_vars(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return check_env_vars(value)

    @model_validator(mode="after")
    def _single_agent_env_options(self) -> RolloutJobSpec:
        check_autoscaling(self.autoscaling, self.redis.backpressure)
        if self.evaluation is not None and (self.multi_agent is not None or self.env.external is not None):
            what = "multiAgent" if self.multi_agent is not None else "env.external"
            raise _SubfieldError(
                "evaluation", f"evaluates single-agent envs the worker steps; leave it out with {what}"
            )
        if self.sampling.infos and (self.multi_agent is not None or self.env.external is not None):
            what = "multiAgent" if self.multi_agent is not None else "env.external"
            raise _SubfieldError("sampling.infos", f"records single-agent env infos; leave it out with {what}")
        if self.sampling.infos and self.env.vectorization == "async":
            raise _SubfieldError("sampling.infos", "needs the step infos, which env.vectorization 'async' drops")
        if self.league is not None:
            if self.multi_agent is None:
                raise _SubfieldError("league", "plays multi-agent jobs' opponents; give spec.multiAgent too")
            if self.league.opponent not in self.multi_agent.policies:
                known = ", ".join(self.multi_agent.policies)
                raise _SubfieldError(
                    "league.opponent",
                    f"unknown policy id {self.league.opponent!r}; spec.multiAgent.policies has {known}",
                )
            if self.league.opponent in self.multi_agent.trained_policies:
                raise _SubfieldError(
                    "league.opponent",
                    f"policy {self.league.opponent!r} is trained; leave it out of spec.multiAgent.policiesToTrain "
                    "(without policiesToTrain every policy is trained)",
                )
        if self.multi_agent is not None:
            if self.env.external is not None:
                raise _SubfieldError("env.external", "serves single-agent simulators; leave out multiAgent")
            if self.env.wrappers:
                raise _SubfieldError(
                    "env.wrappers", "wrap single-agent envs only; wrap a multi-agent env in its entry point"
                )
            if self.env.vectorization == "envpool":
                raise _SubfieldError("env.vectorization", "'envpool' steps single-agent envs only")
            for policy_id, overrides in self.multi_agent.policies.items():
                merged = overrides.apply(self.policy)  # spec.policy's fields, then the policy's own
                try:
                    check_recurrent(merged.recurrent, merged.entry_point)
                except _SubfieldError as exc:
                    raise _SubfieldError(f"multiAgent.policies.{policy_id}.{exc.path}", str(exc)) from None
        return self


class ObjectMeta(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    name: str
    namespace: str = "default"

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # 50, not 63: a worker pod's name, <name>-worker-<index>, must be a DNS label too.
        return _dns_label(value, 50)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        return _dns_label(value, 63)  # any namespace Kubernetes has


def _dns_label(value: str, longest: int) -> str:
    if len(value) > longest or not _DNS_LABEL.match(value):
        raise ValueError(f"must be a lowercase DNS label (a-z, 0-9, '-'), at most {longest} characters, got {value!r}")
    return value


class RolloutJob(_Model):
    """A whole manifest: ``apiVersion``, ``kind``, ``metadata``, ``spec``.

    >>> job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1"}}})
    >>> job.spec.env.num_envs
    1
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["rolloutfleet.io/v1alpha1"] = "rolloutfleet.io/v1alpha1"
    kind: Literal["RolloutJob"] = "RolloutJob"
    metadata: ObjectMeta
    spec: RolloutJobSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def published_policies(self) -> list[str | None]:
        """The policies whose rows workers publish, each on its own stream: a multi-agent
        job's trained ones, and ``spec.league``'s opponent with ``publishOpponentRows``;
        ``[None]`` for a single-agent job (its stream's keys name no policy)."""
        multi, league = self.spec.multi_agent, self.spec.league
        if multi is None:
            return [None]
        published: list[str | None] = list(multi.trained_policies)
        if league is not None and league.publish_opponent_rows:
            published.append(league.opponent)
        return published

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutJob:
        """Validate a parsed manifest; raises :class:`SpecError` naming each bad field."""
        if not isinstance(data, Mapping):
            raise SpecError(f"a RolloutJob manifest must be a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(plain_json(data))
        except ValidationError as exc:
            raise SpecError(describe_errors(exc)) from None

    @classmethod
    def from_file(cls, path: str | Path) -> RolloutJob:
        """Read and validate a YAML (or JSON) manifest holding one RolloutJob."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"{path}: cannot read manifest: {exc.strerror}") from None
        try:
            documents = [doc for doc in load_documents(text) if doc is not None]
        except yaml.YAMLError as exc:
            raise SpecError(f"{path}: not valid YAML: {yaml_problem(exc)}") from None
        jobs = [doc for doc in documents if isinstance(doc, Mapping) and doc.get("kind", KIND) == KIND]
        if len(jobs) != 1:
            raise SpecError(f"{path}: expected exactly one RolloutJob document, found {len(jobs)}")
        try:
            return cls.from_dict(jobs[0])
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The manifest as Kubernetes would store it (camelCase keys, defaults filled in)."""
        return self.model_dump(mode="json", by_alias=True)

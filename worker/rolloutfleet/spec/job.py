"""The RolloutJob manifest: one typed model shared by the worker, the CLI and the operator.

This module imports neither torch nor gymnasium (nor any client library), so the
operator's image can validate manifests without them. Field names follow the
Kubernetes convention (camelCase in YAML, snake_case in Python)::

    job = RolloutJob.from_file("examples/cartpole.yaml")
    job.spec.env.num_envs          # 8
    job.spec.sampling.batch_mode   # "truncate_episodes"

Anything wrong raises one :class:`SpecError` whose message names the field, e.g.
``spec.sampling.batchMode: must be one of 'truncate_episodes', 'complete_episodes'``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from rolloutfleet.spec.autoscaling import AutoscalingSpec, check_autoscaling
from rolloutfleet.spec.disruption import DisruptionSpec, PodTemplateSpec
from rolloutfleet.spec.error_lines import describe_errors
from rolloutfleet.spec.evaluation import EvaluationSpec
from rolloutfleet.spec.exploration import ExplorationSpec
from rolloutfleet.spec.external import ExternalSpec
from rolloutfleet.spec.manifest_yaml import load_documents, yaml_problem
from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError
from rolloutfleet.spec.model_base import plain_json
from rolloutfleet.spec.network import NetworkSpec, RedisTLSSpec
from rolloutfleet.spec.placement import check_env_vars, check_tolerations
from rolloutfleet.spec.redis_keys import MAX_SHARDS
from rolloutfleet.spec.redis_url import parse_redis_url
from rolloutfleet.spec.wrappers import MAX_WRAPPERS, WrapperSpec

API_VERSION = "rolloutfleet.io/v1alpha1"
KIND = "RolloutJob"

# "package.module:attribute" — the attribute part may be dotted (Class.factory).
_ENTRY_POINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
# RFC 1123 label: what Kubernetes accepts as a name we later embed in pod names.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+)$")
# Policy ids are parts of Redis keys and .npz member names: no braces, slashes or colons.
_POLICY_ID = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")


MAX_NUM_ENVS = 4096
MAX_FRAGMENT_LENGTH = 100_000
MAX_LAYERS = 64
MAX_LAYER_WIDTH = 16384
"""Sane upper bounds (the CRD has the same): a larger value is a typo, not a plan."""

_QUANTITY = re.compile(
    r"^([+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_QUANTITY_SCALE = {
    None: 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}  # fmt: skip


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (``"512Mi"`` -> 536870912.0); ``ValueError`` when it is not one.

    >>> parse_quantity("1Gi"), parse_quantity("1.5G"), parse_quantity("1e3"), parse_quantity(128)
    (1073741824.0, 1500000000.0, 1000.0, 128.0)
    """
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"not a Kubernetes quantity (e.g. 512Mi, 2Gi): {value!r}")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix is not None and suffix[0] in "eE":
        return number * 10.0 ** int(suffix[1:])
    return number * _QUANTITY_SCALE[suffix]


class SpecError(ValueError):
    """A manifest is invalid. The message names every offending field."""


def _check_entry_point(value: str | None) -> str | None:
    if value is not None and not _ENTRY_POINT.match(value):
        raise ValueError(f"must look like 'package.module:name', got {value!r}")
    return value


def _check_layers(value: list[int]) -> list[int]:
    if not value or any(size < 1 for size in value):
        raise ValueError(f"must be a non-empty list of positive layer sizes, got {value}")
    if len(value) > MAX_LAYERS or max(value) > MAX_LAYER_WIDTH:
        raise ValueError(f"at most {MAX_LAYERS} layers of at most {MAX_LAYER_WIDTH} units each, got {value}")
    return value


def _check_device(value: str) -> str:
    if not _DEVICE.match(value):
        raise ValueError(f"must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {value!r}")
    return value


class EnvSpec(_Model):
    """What to step: a gymnasium id or an entry point, and how many sub-environments."""

    id: str | None = None
    """A registered gymnasium id, e.g. ``CartPole-v1``; ``config`` is passed as keyword arguments."""
    entry_point: str | None = None
    """``pkg.module:make_env``: a callable taking an :class:`~rolloutfleet.sampling.envs.EnvContext`."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Handed to the env creator (with worker_index / vector_index / num_workers for entry points)."""
    num_envs: int = Field(default=1, ge=1, le=MAX_NUM_ENVS)
    """Sub-environments per worker, stepped together with one batched policy call."""
    vectorization: Literal["auto", "sync", "async", "vector", "envpool"] = "auto"
    """``vector`` uses the env's own vectorized implementation (gymnasium ``vector_entry_point``),
    ``sync`` steps sub-envs in this process, ``async`` in one process per CPU (heavy envs),
    ``envpool`` EnvPool's C++ implementation of the id (Atari, MuJoCo; the ``envpool`` extra).
    ``auto`` picks ``vector`` when the id has one (and no wrappers are given), else ``async`` when
    a sub-env step takes 0.5 ms or more and the worker has two CPUs or more, else ``sync``."""
    wrappers: list[WrapperSpec] = Field(default_factory=list, max_length=MAX_WRAPPERS)
    """gymnasium wrappers around each sub-env, innermost first (:mod:`rolloutfleet.spec.wrappers`)."""
    restart_failed_sub_envs: bool = True
    """Recreate a sub-environment that raises, dropping its episode (counted in metrics)."""
    max_consecutive_failures: int = Field(default=3, ge=1, le=1000)
    """A sub-env (the vector env, for ``vector``/``async``) failing this many times in a row
    without a successful step ends the worker: exit 3, one line naming the env and the error."""
    call_timeout_seconds: float = Field(default=300.0, gt=0, le=86400)
    """An env constructor, ``reset`` or ``step`` still running after this long ends the worker:
    logged once, counted, exit 3 with one line naming the sub-env and the call
    (:mod:`rolloutfleet.fleet.env_watchdog`)."""
    external: ExternalSpec | None = None
    """The env runs outside the fleet and calls the workers for actions (:mod:`rolloutfleet.spec.external`)."""

    @field_validator("entry_point")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return _check_entry_point(value)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> EnvSpec:
        if self.external is not None:
            return check_external(self)
        if (self.id is None) == (self.entry_point is None):
            raise ValueError("give exactly one of 'id' (a gymnasium id) or 'entryPoint' (pkg.module:callable)")
        if self.entry_point is not None and self.vectorization in ("vector", "envpool"):
            raise ValueError(f"vectorization {self.vectorization!r} needs an env 'id'")
        if self.wrappers and self.vectorization in ("vector", "envpool"):
            hint = " (EnvPool preprocesses with its own options in 'config')" if self.vectorization == "envpool" else ""
            raise _SubfieldError(
                "wrappers",
                f"wrap single sub-envs, which vectorization {self.vectorization!r} does not have: "
                f"use 'sync' or 'async'{hint}",
            )
        return self


def check_external(env: EnvSpec) -> EnvSpec:
    """An external env takes its spaces from ``id`` or declares them, and has no local env to build."""
    assert env.external is not None
    if env.entry_point is not None:
        raise _SubfieldError("entryPoint", "an external env runs outside the fleet; give 'id' or declare the spaces")
    if (env.id is not None) == env.external.declares_spaces:
        raise _SubfieldError(
            "external", "give the spaces once: 'id' (a gymnasium id) or external.observationSpace/actionSpace"
        )
    if env.wrappers or env.num_envs != 1:
        raise _SubfieldError("external", "wrappers and numEnvs are for envs the worker steps; leave them out")
    return env


MAX_STATE_SIZE = 16384
"""The largest ``policy.recurrent.size`` (the CRD has the same)."""


class RecurrentSpec(_Model):
    """Wrap the default model in a recurrent cell (RLlib's ``use_lstm``): observations go
    through the default MLP (CNN for images), then an LSTM or GRU of ``size`` units, then the
    policy and value heads. Acts in torch; each sub-env (each agent) carries its own state."""

    cell: Literal["lstm", "gru"] = "lstm"
    size: int = Field(default=256, ge=1, le=MAX_STATE_SIZE)
    """Units of the cell (its state: ``h`` and, for an LSTM, ``c``, each of this size)."""


class PolicySpec(_Model):
    """Which torch model acts, and where it runs."""

    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the default MLP (used for flat observations)."""
    activation: Literal["tanh", "relu"] = "tanh"
    vf_share_layers: bool = True
    """The value head reads the policy's hidden layers (RLlib's DefaultModelConfig default), or
    has an MLP of its own (False): twice the inference cost per step."""
    entry_point: str | None = None
    """``pkg.module:MyPolicy``: an ``nn.Module`` class built as ``MyPolicy(obs_space, act_space, **config)``."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for a custom policy class."""
    device: str = "auto"
    """``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``."""
    explore: bool = True
    """Explore as ``exploration`` says (True) or take the most likely action (False)."""
    exploration: ExplorationSpec = Field(default_factory=ExplorationSpec)
    """``stochastic`` (sample the distribution), ``epsilonGreedy``, ``gaussian`` or ``ornsteinUhlenbeck``
    (:mod:`rolloutfleet.spec.exploration`)."""
    inference: Literal["auto", "torch"] = "auto"
    """``auto`` runs the default MLP's forward pass through a numpy mirror of its weights on the
    CPU (several times faster for per-step batches); ``torch`` always calls the module."""
    num_threads: int | None = Field(default=1, ge=1)
    """CPU inference threads: torch's intra-op pool and numpy's BLAS pool in a worker process; 1 is
    fastest for per-step batches (null: the libraries' defaults, one thread per CPU)."""
    recurrent: RecurrentSpec | None = None
    """``{cell: lstm|gru, size: N}``: the default model with a recurrent cell (needs torch);
    rows then carry ``state_in_<k>`` columns. A custom model declares its own state instead."""
    state_out: bool = False
    """Stateful models: also record each row's ``state_out_<k>`` (the state after the step)."""

    @field_validator("entry_point")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return _check_entry_point(value)

    @field_validator("hidden")
    @classmethod
    def _positive_layers(cls, value: list[int]) -> list[int]:
        return _check_layers(value)

    @field_validator("device")
    @classmethod
    def _device_syntax(cls, value: str) -> str:
        return _check_device(value)

    @model_validator(mode="after")
    def _recurrent_wraps_the_default_model(self) -> PolicySpec:
        check_recurrent(self.recurrent, self.entry_point)
        return self


def check_recurrent(recurrent: RecurrentSpec | None, entry_point: str | None) -> None:
    """``recurrent`` wraps the default model only: a custom model declares its own state."""
    if recurrent is not None and entry_point is not None:
        raise _SubfieldError(
            "recurrent",
            "wraps the default model; a custom entryPoint model is stateful by declaring initial_state() "
            "and forward(obs, state) itself",
        )


class PolicyOverrides(_Model):
    """One policy of a multi-agent job: any field of ``spec.policy``, overriding it for this policy."""

    hidden: list[int] | None = None
    activation: Literal["tanh", "relu"] | None = None
    vf_share_layers: bool | None = None
    entry_point: str | None = None
    config: dict[str, Any] | None = None
    device: str | None = None
    explore: bool | None = None
    exploration: ExplorationSpec | None = None
    inference: Literal["auto", "torch"] | None = None
    num_threads: int | None = Field(default=None, ge=1)
    recurrent: RecurrentSpec | None = None
    state_out: bool | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return _check_entry_point(value)

    @field_validator("hidden")
    @classmethod
    def _positive_layers(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else _check_layers(value)

    @field_validator("device")
    @classmethod
    def _device_syntax(cls, value: str | None) -> str | None:
        return None if value is None else _check_device(value)

    def apply(self, base: PolicySpec) -> PolicySpec:
        """``base`` with the fields given here replaced; a field left out (or null) keeps ``base``'s value."""
        update = {name: value for name in type(self).model_fields if (value := getattr(self, name)) is not None}
        return base.model_copy(update=update)


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
        return _check_entry_point(value)

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


class SamplingSpec(_Model):
    """How experience is cut into batches and preprocessed."""

    rollout_fragment_length: int = Field(default=200, ge=1, le=MAX_FRAGMENT_LENGTH)
    """Env steps per sub-environment per batch (truncate_episodes)."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    observation_filter: Literal["none", "meanStd"] = "none"
    clip_rewards: float | None = Field(default=None, gt=0)
    """Clip rewards stored in batches to [-bound, bound]; episode metrics use raw rewards."""
    clip_actions: bool = False
    """Clip continuous actions to the space's bounds before the env sees them (batches keep the sample)."""
    seed: int | None = Field(default=None, ge=0)
    """Base seed: worker i, sub-env j get distinct seeds derived from (seed, i, j)."""
    callbacks: str | None = None
    """``pkg.module:MyCallbacks``: a :class:`rolloutfleet.sampling.callbacks.Callbacks` subclass."""
    infos: list[str] = Field(default_factory=list, max_length=64)
    """Keys of the env's ``info`` recorded as batch columns ``infos/<key>`` (numeric scalars or
    fixed-shape arrays) with a mask ``infos/_<key>`` (docs/guides/sampling.md); single-agent envs."""

    @field_validator("callbacks")
    @classmethod
    def _entry_point_syntax(cls, value: str | None) -> str | None:
        return _check_entry_point(value)

    @field_validator("infos")
    @classmethod
    def _info_keys(cls, value: list[str]) -> list[str]:
        for key in value:
            if not key or key.startswith("_") or "/" in key:
                raise ValueError(f"info key {key!r}: must be non-empty, not start with '_' and hold no '/'")
        if len(set(value)) != len(value):
            raise ValueError(f"info keys repeat: {value}")
        return value


class PasswordSecretRef(_Model):
    name: str
    key: str = "password"


class RedisSpec(_Model):
    """Where batches and weights meet the learner."""

    url: str = "redis://localhost:6379/0"
    """``redis://`` or ``rediss://`` (TLS). Never put a password here: use passwordSecret."""
    password_secret: PasswordSecretRef | None = None
    """Kubernetes Secret holding the password; workers read it from ROLLOUTFLEET_REDIS_PASSWORD."""
    tls: RedisTLSSpec | None = None
    """``caSecret``: the CA that verifies a ``rediss://`` server, mounted read-only in the workers."""
    admin_secret: PasswordSecretRef | None = None
    """A Secret in the job's namespace with an admin password (and optionally ``username``) of
    the job's own Redis: the operator mints the job's Redis users there (docs/operations/security.md)."""
    max_len: int = Field(default=1000, ge=1)
    """Upper bound on entries kept in the job's batch stream."""
    backpressure: Literal["block", "dropOldest"] = "block"
    """When the stream is full: block the worker (with a timeout) or trim the oldest entries (counted)."""
    block_timeout_seconds: float = Field(default=60.0, gt=0)
    compression: Literal["none", "lz4", "zstd"] = "none"
    shards: int | None = Field(default=None, ge=1, le=MAX_SHARDS)
    """Batch streams of the job, each in its own hash slot (a Redis Cluster spreads them over
    its masters); worker ``i`` writes shard ``i % shards``. Unset: 1 on a plain Redis, one
    per master (at most 16) on a Redis Cluster."""

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        parsed = parse_redis_url(value)  # BadRedisURL: one line without the credentials
        if parsed.password is not None:
            raise ValueError("must not contain a password; use passwordSecret")
        return value

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> RedisSpec:
        if self.tls is not None and self.tls.ca_secret is not None and not self.url.lower().startswith("rediss://"):
            raise ValueError("tls.caSecret verifies a TLS server: the url must start with rediss://")
        return self


class RestartPolicySpec(_Model):
    """How failed workers are replaced (the operator and the local fleet share these semantics)."""

    max_restarts: int = Field(default=1000, ge=0)
    backoff_seconds: float = Field(default=1.0, ge=0)
    backoff_limit_seconds: float = Field(default=60.0, ge=0)


class ResourcesSpec(_Model):
    """Container resources; ``gpu`` becomes ``nvidia.com/gpu``."""

    cpu: str | None = None
    """CPU request and limit of each worker; ``async`` runs one env process per CPU (rounded up)."""
    memory: str | None = None
    """Memory request and limit of each worker; the worker refuses a model and fragment that need more."""
    gpu: int = Field(default=0, ge=0)

    @field_validator("cpu", "memory", mode="before")
    @classmethod
    def _int_or_string(cls, value: Any) -> Any:
        # The CRD's int-or-string: `cpu: 2` is the quantity "2" (a float is neither, as there).
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("cpu", "memory")
    @classmethod
    def _quantity(cls, value: str | None) -> str | None:
        if value is not None:
            parse_quantity(value)
        return value


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
    priority_class_name: str | None = None
    service_account_name: str | None = None
    env_vars: list[dict[str, Any]] = Field(default_factory=list, alias="extraEnv")
    template: PodTemplateSpec = Field(default_factory=PodTemplateSpec)
    """``metadata.labels`` / ``metadata.annotations`` of the worker pods (:mod:`rolloutfleet.spec.disruption`)."""
    disruption: DisruptionSpec = Field(default_factory=DisruptionSpec)
    """The PodDisruptionBudget's ``maxUnavailable`` and ``nodeLossSeconds`` (:mod:`rolloutfleet.spec.disruption`)."""
    network: NetworkSpec = Field(default_factory=NetworkSpec)
    """``egress``: what the workers may reach beyond Redis and DNS (:mod:`rolloutfleet.spec.network`)."""
    autoscaling: AutoscalingSpec | None = None
    """``{minReplicas, maxReplicas, ...}``: the number of workers follows the learner's appetite
    (:mod:`rolloutfleet.spec.autoscaling`); ``replicas`` is then only the size to start from."""
    evaluation: EvaluationSpec | None = None
    """``{workers, episodes, explore, seed, ...}``: evaluation workers that play whole episodes of
    each new weights version and publish its return (:mod:`rolloutfleet.spec.evaluation`)."""

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

    @field_validator("name", "namespace")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if len(value) > 50 or not _DNS_LABEL.match(value):
            raise ValueError(f"must be a lowercase DNS label (a-z, 0-9, '-'), at most 50 characters, got {value!r}")
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

"""Sizes checked up front: what a job's model and fragments will weigh, before anything is
sampled or allocated.

``rolloutfleet validate`` and every worker at start-up build one sub-env to learn the spaces,
then estimate (:func:`estimate`, pure but for the meta-device model):

* the model's parameters: the default MLP's from its layout (no torch), a CNN's or a custom
  module's by building it on torch's ``meta`` device (shapes, no memory);
* the bytes of one fragment as published: ``numEnvs x rolloutFragmentLength`` rows, each
  with ``obs`` and ``new_obs`` plus the fixed columns (before compression).

:func:`problems` refuses, naming the field, what cannot work: a fragment above the
publisher's payload cap (uncompressed; with ``compression`` set, above four times the cap),
a default model above :data:`MAX_MODEL_PARAMETERS`, or a model and a fragment that need
more than ``spec.resources.memory``. A multi-agent job's per-policy sizes are not
estimated (its spaces are per agent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gymnasium import spaces

from rolloutfleet.inference.default_mlp import MLPLayout, is_image_space
from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.obs_spaces import obs_parts
from rolloutfleet.sampling.env.creators import env_build_errors
from rolloutfleet.sampling.vector.make import env_spaces
from rolloutfleet.spec.job import RolloutJob, SpecError, parse_quantity

PAYLOAD_CAP_BYTES = 32 << 20
"""The publisher's default ``max_payload_bytes`` (``transport.publisher``; sampling cannot import it)."""
COMPRESSED_ALLOWANCE = 4
"""With lz4/zstd, fragments up to this many times the cap (uncompressed) are let through."""
MAX_MODEL_PARAMETERS = 50_000_000
"""The default MLP's limit (200 MB of float32): far above any rollout policy's need."""
MODEL_COPIES = 3
"""A worker holds its model, a copy while loading and one incoming weights version."""
FRAGMENT_COPIES = 2
"""A worker holds the fragment's rows and their encoded payload."""
# rewards f4, terminateds/truncateds b1, eps_id i8, env_id i8, agent_index i4, t i8,
# action_logp f4, vf_preds f4, weights_seq_no i8
FIXED_ROW_BYTES = 4 + 1 + 1 + 8 + 8 + 4 + 8 + 4 + 4 + 8


@dataclass(frozen=True)
class SizeEstimate:
    parameters: int | None
    """None: a custom policy that could not be built on the meta device."""
    row_bytes: int
    rows: int

    @property
    def fragment_bytes(self) -> int:
        return self.row_bytes * self.rows

    @property
    def model_bytes(self) -> int:
        return 4 * (self.parameters or 0)

    def describe(self) -> str:
        model = "a custom model" if self.parameters is None else f"a model of {self.parameters:,} parameters"
        return f"{model}, about {_size(self.fragment_bytes)} per fragment ({self.rows:,} rows)"


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def value_bytes(space: spaces.Space[Any], as_float32: bool = False) -> int:
    """Bytes of one value of ``space`` in a batch column."""
    if isinstance(space, spaces.Box):
        return math.prod(space.shape) * (4 if as_float32 else space.dtype.itemsize)
    if isinstance(space, spaces.Discrete):
        return 4 if as_float32 else 8
    if isinstance(space, spaces.Dict | spaces.Tuple):  # one column per leaf
        parts = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return sum(value_bytes(part, as_float32) for part in parts)
    if isinstance(space, spaces.MultiBinary | spaces.MultiDiscrete):
        return math.prod(space.shape) * (4 if as_float32 else space.dtype.itemsize)  # type: ignore[union-attr]
    return 0  # not an array (Text, Graph): refused by space_problems


def model_parameters(job: RolloutJob, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> int | None:
    """The policy model's parameter count: the default MLP's from its layout (no torch: a
    numpy worker never imports it), a CNN's or a custom module's built on torch's meta device
    (shapes, no memory); None when it cannot be built there (its real build reports why)."""
    spec = job.spec.policy
    distribution = distribution_for(act_space)
    try:
        parts = obs_parts(obs_space, act_space)
    except ValueError:
        return None  # the worker's own build names the problem
    obs_space, images = parts.model_space, parts.images  # a Dict/Tuple's model input, its image leaves
    if spec.entry_point is None and spec.recurrent is None and not (images or is_image_space(obs_space)):
        try:
            layout = MLPLayout.of(obs_space, distribution, list(spec.hidden), spec.activation, spec.vf_share_layers)
        except ValueError:
            return None
        return sum(math.prod(shape) for name, shape in layout.shapes().items() if not name.endswith("_buf"))
    import torch  # a CNN or a custom module: the worker loads torch for it anyway

    from rolloutfleet.inference.torch_model import build_module

    try:
        with torch.device("meta"):
            model = build_module(spec, obs_space, act_space, distribution, None, images)
    except Exception:  # noqa: BLE001 - not estimated; the worker's own build names the problem
        return None
    return sum(p.numel() for p in model.parameters())


def estimate(job: RolloutJob, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> SizeEstimate:
    filtered = job.spec.sampling.observation_filter == "meanStd"
    row = 2 * value_bytes(obs_space, filtered) + value_bytes(act_space) + FIXED_ROW_BYTES
    row += 4 * distribution_for(act_space).num_inputs
    recurrent = job.spec.policy.recurrent
    if recurrent is not None:  # state_in_<k> (and state_out_<k>) columns, float32
        parts = 2 if recurrent.cell == "lstm" else 1
        row += 4 * recurrent.size * parts * (2 if job.spec.policy.state_out else 1)
    rows = job.spec.env.num_envs * job.spec.sampling.rollout_fragment_length
    return SizeEstimate(model_parameters(job, obs_space, act_space), row, rows)


def problems(job: RolloutJob, size: SizeEstimate) -> list[str]:
    """What cannot work, one message per problem, each naming the field to change."""
    spec, found = job.spec, []
    cap = PAYLOAD_CAP_BYTES * (1 if spec.redis.compression == "none" else COMPRESSED_ALLOWANCE)
    if size.fragment_bytes > cap:
        found.append(
            f"spec.sampling.rolloutFragmentLength: a fragment of {spec.sampling.rollout_fragment_length:,} steps x "
            f"{spec.env.num_envs:,} envs is about {_size(size.fragment_bytes)}, above the {_size(cap)} a batch may "
            "encode to; lower rolloutFragmentLength or spec.env.numEnvs"
        )
    if spec.policy.entry_point is None and (size.parameters or 0) > MAX_MODEL_PARAMETERS:
        found.append(
            f"spec.policy.hidden: {list(spec.policy.hidden)} makes a model of {size.parameters:,} parameters, "
            f"above the limit of {MAX_MODEL_PARAMETERS:,}"
        )
    if spec.resources.memory is not None:
        need = MODEL_COPIES * size.model_bytes + FRAGMENT_COPIES * size.fragment_bytes
        have = parse_quantity(spec.resources.memory)
        if need > have:
            found.append(
                f"spec.resources.memory: {spec.resources.memory} is less than the model and one fragment need, "
                f"about {_size(need)} ({size.describe()})"
            )
    return found


def _spaces(job: RolloutJob) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """A sub-env's spaces; a failure is a SpecError naming the field (as the runner says it)."""
    from rolloutfleet.sampling.env.external_spaces import external_spaces

    declared = external_spaces(job.spec.env)
    if declared is not None:
        return declared
    with env_build_errors(job.spec.env):
        return env_spaces(job.spec.env, worker_index=0, num_workers=max(job.spec.replicas, 1), reset=True)


def space_problems(job: RolloutJob, obs_space: spaces.Space[Any], act_space: spaces.Space[Any]) -> list[str]:
    """Observations the workers could not read (a Text or Graph leaf, a filter on a Dict), named."""
    try:
        obs_parts(obs_space, act_space)
    except ValueError as exc:
        return [f"spec.env: {exc}"]
    if job.spec.sampling.observation_filter == "meanStd" and not isinstance(obs_space, spaces.Box):
        return [
            f"spec.sampling.observationFilter: meanStd normalizes Box observations, this env's are {obs_space}; "
            "normalize them in the env or set observationFilter: none"
        ]
    return []


def check_sizes(job: RolloutJob) -> SizeEstimate | None:
    """Build one sub-env, estimate, and raise :class:`SpecError` naming each field that cannot
    work; None for a multi-agent job (not estimated)."""
    if job.spec.multi_agent is not None:
        return None
    obs_space, act_space = _spaces(job)
    size = estimate(job, obs_space, act_space)
    found = space_problems(job, obs_space, act_space) + problems(job, size)
    if found:
        raise SpecError("; ".join(found))
    return size


__all__ = ["PAYLOAD_CAP_BYTES", "SizeEstimate", "check_sizes", "estimate", "problems"]

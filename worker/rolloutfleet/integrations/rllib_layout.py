"""What RLlib's modules and episodes are in the fleet's terms, without Ray: the model config that
builds the workers' network in RLlib, the check that an RLlib module is that network (by name,
shape and dtype), and where a batch's rows split into RLlib's episode chunks.
:mod:`rolloutfleet.integrations.rllib` (which needs ``rolloutfleet[rllib]``) applies them.

RLlib's default MLP modules for PPO (``DefaultPPOTorchRLModule``) and for DQN without dueling
(``DefaultDQNTorchRLModule``: Q-values the workers act on greedily, as their logits under
``policy.exploration: epsilonGreedy``) and the workers' default model
(:class:`~rolloutfleet.inference.models.DefaultModel`) are the same network under other names:

============================================  ==========================
RLlib (new API stack)                          the workers
============================================  ==========================
``encoder.encoder.net.mlp.<2i>``              ``actor_trunk.<2i+1>`` (``vf_share_layers``)
``encoder.actor_encoder.net.mlp.<2i>``        ``actor_trunk.<2i+1>``
``encoder.critic_encoder.net.mlp.<2i>``       ``critic_trunk.<2i+1>``
``pi.net.mlp.0``                              ``pi``
``vf.net.mlp.0``                              ``vf``
``encoder.net.mlp.<2i>`` (DQN)                ``actor_trunk.<2i+1>``
``af.net.mlp.0`` (DQN's Q-values)             ``pi`` (the workers' logits)
``pi.log_std`` (``free_log_std``, Box actions)  ``log_std``
============================================  ==========================

(each ``.weight`` and ``.bias``). ``*.log_std_clip_param_const`` is a constant of RLlib's heads
and has no counterpart.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rolloutfleet.spec.sections.policy_spec import PolicySpec

_RENAMES = (
    (re.compile(r"^encoder\.(?:encoder\.|actor_encoder\.)?net\.mlp\.(\d+)\.(weight|bias)$"), "actor_trunk"),
    (re.compile(r"^encoder\.critic_encoder\.net\.mlp\.(\d+)\.(weight|bias)$"), "critic_trunk"),
)
_HEADS = {"pi.net.mlp.0": "pi", "vf.net.mlp.0": "vf", "af.net.mlp.0": "pi"}
_CONSTANTS = re.compile(r"\.log_std_clip_param_const$")
VALUE_SIDE = ("critic_trunk.", "vf.")
"""The workers' parameters RLlib leaves out of an inference-only state (the value function)."""


class ModuleRefused(ValueError):
    """An RLlib module or config that is not the workers' network: the message says what differs."""


def model_config(policy: PolicySpec, box_actions: bool = False) -> dict[str, Any]:
    """The keyword arguments of RLlib's ``DefaultModelConfig`` that build the workers' network
    for ``policy`` (``spec.policy``). ``box_actions``: a Box action space, whose Gaussian's log
    standard deviations the workers' network holds as parameters of their own (RLlib's
    ``free_log_std``), not as outputs of the head.

    >>> model_config(PolicySpec(hidden=[64, 64], vf_share_layers=False))["fcnet_hiddens"]
    [64, 64]
    """
    return {
        "fcnet_hiddens": list(policy.hidden),
        "fcnet_activation": policy.activation,
        "vf_share_layers": policy.vf_share_layers,
        "head_fcnet_hiddens": [],
        "free_log_std": box_actions,
    }


def config_mismatches(
    policy: PolicySpec, rllib_model_config: Mapping[str, Any], value_function: bool = True, box_actions: bool = False
) -> list[str]:
    """Where RLlib's model config (``config.model_config``, a dict) builds another network than
    the workers run for ``policy``; empty when it is the same network. ``value_function=False``
    (DQN): RLlib's module has none, so ``vf_share_layers`` does not matter. ``box_actions``: as
    for :func:`model_config`.

    >>> config_mismatches(PolicySpec(hidden=[64, 64]), {"fcnet_hiddens": [256, 256], "vf_share_layers": True})
    ["fcnet_hiddens=[256, 256] (the workers' spec.policy.hidden is [64, 64])"]
    """
    if policy.entry_point is not None or policy.recurrent is not None:
        kind = (
            "a custom model (spec.policy.entryPoint)"
            if policy.entry_point
            else "a recurrent model (spec.policy.recurrent)"
        )
        return [f"the workers run {kind}; the RLlib adapter maps RLlib's default MLP only"]
    wanted = model_config(policy, box_actions)
    spec_names = {"fcnet_hiddens": "hidden", "fcnet_activation": "activation", "vf_share_layers": "vfShareLayers"}
    found = []
    for key, value in wanted.items():
        if key == "vf_share_layers" and not value_function:
            continue
        theirs = rllib_model_config.get(key, _RLLIB_DEFAULTS[key])
        if (list(theirs) if isinstance(theirs, list | tuple) else theirs) != value:
            where = (
                f"spec.policy.{spec_names[key]} is {value!r}" if key in spec_names else _OTHERWISE[key].format(value)
            )
            found.append(f"{key}={theirs!r} (the workers' {where})")
    for key, off in (("use_lstm", False), ("fcnet_use_layernorm", False)):
        if rllib_model_config.get(key, off) != off:
            found.append(f"{key}={rllib_model_config[key]!r} (the workers' network has none)")
    return found


_OTHERWISE = {
    "head_fcnet_hiddens": "heads are one layer: {!r}",
    "free_log_std": "Gaussian log standard deviations are parameters of their own: {!r}",
}
_RLLIB_DEFAULTS: dict[str, Any] = {
    "fcnet_hiddens": [256, 256],
    "fcnet_activation": "tanh",
    "vf_share_layers": True,
    "head_fcnet_hiddens": [],
    "free_log_std": False,
}
"""RLlib 2.60's ``DefaultModelConfig`` for the keys :func:`model_config` sets."""


def fleet_name(rllib_name: str) -> str | None:
    """The workers' parameter name of an RLlib module's; None for RLlib's constants.
    ``ModuleRefused`` names one that has no counterpart.

    >>> fleet_name("encoder.actor_encoder.net.mlp.2.weight"), fleet_name("pi.net.mlp.0.bias")
    ('actor_trunk.3.weight', 'pi.bias')
    """
    if _CONSTANTS.search(rllib_name):
        return None
    for pattern, trunk in _RENAMES:
        if match := pattern.match(rllib_name):
            return f"{trunk}.{int(match.group(1)) + 1}.{match.group(2)}"
    if rllib_name == "pi.log_std":
        return "log_std"
    head, _, leaf = rllib_name.rpartition(".")
    if head in _HEADS and leaf in ("weight", "bias"):
        return f"{_HEADS[head]}.{leaf}"
    raise ModuleRefused(f"RLlib's module parameter {rllib_name!r} has no counterpart in the workers' network")


def fleet_weights(
    rllib_state: Mapping[str, Any],
    signature: Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]],
    value_side: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """An RLlib module's state (name -> array or tensor) as the workers' weights for a network
    of ``signature`` (name -> (shape, dtype): :meth:`Policy.weights_signature`).

    Every name must map, with the shape and the dtype the workers have. An inference-only state
    (what RLlib syncs to its env runners) leaves the value function out: those parameters come
    from ``value_side`` (the workers' own), because RLlib's learner computes values itself and
    never reads the workers' ``vf_preds``. Anything else missing, or any mismatch, raises
    ``ModuleRefused`` listing them all.
    """
    weights: dict[str, np.ndarray] = {}
    problems: list[str] = []
    for rllib_name, value in rllib_state.items():
        try:
            name = fleet_name(rllib_name)
        except ModuleRefused as refused:
            problems.append(str(refused))
            continue
        if name is None:
            continue
        array = _host(value)
        if name not in signature:
            problems.append(f"{rllib_name} -> {name}: the workers' network has no {name}")
            continue
        shape, dtype = signature[name]
        if tuple(array.shape) != tuple(shape) or array.dtype != dtype:
            problems.append(
                f"{rllib_name} -> {name}: {array.dtype}{list(array.shape)}, the workers' is {dtype}{list(shape)}"
            )
        weights[name] = array
    for name in signature.keys() - weights.keys():
        if name.startswith(VALUE_SIDE) and value_side is not None and name in value_side:
            weights[name] = np.asarray(value_side[name])
        else:
            problems.append(f"the workers' {name} is not in RLlib's module")
    if problems:
        raise ModuleRefused("RLlib's module is not the workers' network: " + "; ".join(sorted(problems)))
    return {name: weights[name] for name in signature}


def _host(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        return np.asarray(value.detach().cpu().numpy())
    return np.asarray(value)


def episode_chunks(batch: Mapping[str, np.ndarray], starts: Sequence[int] = ()) -> list[slice]:
    """The rows of each episode chunk in ``batch`` (messages' rows, ``starts`` the first row of
    each message): a new chunk where the episode (``eps_id``) or the sub-environment
    (``env_id``) changes, where a message begins, or where the step count does not follow on.
    A chunk is what one of RLlib's env runners returns for one episode from one ``sample()``.

    >>> episode_chunks({"env_id": np.array([0, 0, 0, 1]), "eps_id": np.array([5, 5, 6, 7]), "t": np.array([8, 9, 0, 0])})
    [slice(0, 2, None), slice(2, 3, None), slice(3, 4, None)]
    """
    t, eps = batch["t"], batch["eps_id"]
    env = batch.get("env_id", np.zeros(len(t), np.int64))
    cut = np.zeros(len(t), np.bool_)
    cut[0:1] = True
    cut[1:] = (env[1:] != env[:-1]) | (eps[1:] != eps[:-1]) | (t[1:] != t[:-1] + 1)
    cut[[s for s in starts if s < len(t)]] = True
    edges = [*np.flatnonzero(cut).tolist(), len(t)]
    return [slice(a, b) for a, b in itertools.pairwise(edges)]

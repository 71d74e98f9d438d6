"""Structured observations: which part of an observation the model reads, and the action mask.

PettingZoo's classic games (and RLlib's action-masking convention) observe a
``spaces.Dict`` of ``{"observation": ..., "action_mask": ...}``: the default model encodes
the ``observation`` leaf, and ``action_mask`` (one 0/1 entry per action of a ``Discrete``
action space) restricts which actions may be sampled. A plain Box, Discrete or
MultiDiscrete observation is read whole and has no mask.

A board of 3-D planes that is not a ``uint8`` image (PettingZoo's ``int8`` boards, say
``(3, 3, 2)``) is flattened for the MLP rather than sent through the CNN.

>>> parts = obs_parts(
...     spaces.Dict({"observation": spaces.Box(0, 1, (3, 3, 2), np.int8), "action_mask": spaces.Box(0, 1, (9,), np.int8)}),
...     spaces.Discrete(9),
... )
>>> parts.leaf, parts.masked, parts.model_space.shape
('observation', True, (18,))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

OBSERVATION_KEY = "observation"
"""The leaf of a Dict observation that the model reads."""
MASK_KEY = "action_mask"
"""The leaf of a Dict observation that says which actions are legal (1) or not (0)."""

_MODEL_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete)


@dataclass(frozen=True)
class ObsParts:
    """How a policy reads observations of ``space``."""

    space: spaces.Space[Any]
    model_space: spaces.Space[Any]
    """The space of what the model is given (a Dict's ``observation`` leaf)."""
    leaf: str | None
    """The Dict key of the model's input, or None for a plain observation."""
    masked: bool
    """The observation carries an ``action_mask``."""


def obs_parts(space: spaces.Space[Any], action_space: spaces.Space[Any]) -> ObsParts:
    """The parts of ``space``; ``ValueError`` naming the leaf for a Dict this cannot read."""
    if not isinstance(space, spaces.Dict):
        return ObsParts(space, space, None, False)
    leaves = dict(space.spaces)
    unknown = sorted(set(leaves) - {OBSERVATION_KEY, MASK_KEY})
    if unknown:
        raise ValueError(
            f"unsupported Dict observation leaves {unknown} in {space}: the default models read "
            f"{{'{OBSERVATION_KEY}': Box|Discrete|MultiDiscrete, '{MASK_KEY}': 0/1 per action}} "
            "(use policy.entryPoint for others, or flatten the env's observations)"
        )
    if OBSERVATION_KEY not in leaves:
        raise ValueError(f"Dict observation space {space} has no '{OBSERVATION_KEY}' leaf for the model to read")
    leaf = leaves[OBSERVATION_KEY]
    if not isinstance(leaf, _MODEL_LEAVES):
        raise ValueError(
            f"unsupported leaf '{OBSERVATION_KEY}': {leaf} in {space}: the default models take Box, Discrete "
            "or MultiDiscrete"
        )
    if MASK_KEY in leaves:
        _check_mask(leaves[MASK_KEY], action_space)
    return ObsParts(space, _model_space(leaf), OBSERVATION_KEY, MASK_KEY in leaves)


def _check_mask(mask: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"leaf '{MASK_KEY}' needs a Discrete action space, the env's is {action_space}")
    n = int(action_space.n)
    if not isinstance(mask, spaces.Box | spaces.MultiBinary) or tuple(mask.shape or ()) != (n,):
        raise ValueError(
            f"leaf '{MASK_KEY}': {mask} must be a Box or MultiBinary of shape ({n},), one entry per action "
            f"of {action_space}"
        )


def _model_space(leaf: spaces.Space[Any]) -> spaces.Space[Any]:
    if isinstance(leaf, spaces.Box) and len(leaf.shape) == 3 and leaf.dtype != np.uint8:
        return spaces.Box(leaf.low.reshape(-1), leaf.high.reshape(-1), dtype=leaf.dtype)  # type: ignore[arg-type]
    return leaf


def check_masks(mask: np.ndarray, agents: list[Any]) -> None:
    """``ValueError`` naming the first agent whose mask allows no action (rows of ``mask`` are ``agents``)."""
    empty = ~mask.any(axis=1)
    if empty.any():
        agent = agents[int(np.flatnonzero(empty)[0])]
        raise ValueError(f"agent {agent!r}: its {MASK_KEY} allows no action (all zeros), so it cannot act")

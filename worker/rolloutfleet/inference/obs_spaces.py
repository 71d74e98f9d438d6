"""Structured observations: their leaves, what the model reads of them, and the action mask.

A ``spaces.Dict`` or ``spaces.Tuple`` observation (nested ones too) is a set of *leaves*
(Box, Discrete, MultiDiscrete or MultiBinary; any other space is refused in one line), each
named by its path, Dict keys and Tuple indices joined by ``/``; a batch stores one column per
leaf (``obs/<path>``). The default model reads a lone leaf beside ``action_mask`` as it is,
any other Dict or Tuple encoded into one float32 vector (:meth:`ObsParts.model_input`; image
leaves through CNNs of their own). A top-level ``action_mask`` is never model input: it
restricts the actions sampled. The rules: docs/guides/multi-agent.md ("Dict and Tuple observations").

>>> parts = obs_parts(spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,)))), spaces.Discrete(2))
>>> parts.leaf, parts.paths, parts.model_space.shape
(None, ('0', '1'), (5,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

OBSERVATION_KEY = "observation"
"""PettingZoo's leaf of a Dict observation that the model reads."""
MASK_KEY = "action_mask"
"""The leaf of a Dict observation that says which actions are legal (1) or not (0)."""

_MODEL_LEAVES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete)
_LEAVES = (*_MODEL_LEAVES, spaces.MultiBinary)
_HINT = "wrap the env so that it observes arrays, or a Dict or Tuple of them"

Leaves = tuple[tuple[str, spaces.Space[Any]], ...]
ImageSlices = tuple[tuple[int, tuple[int, ...]], ...]
"""``(offset, shape)`` of image leaves inside an encoded (flat) model input."""


@dataclass(frozen=True)
class ObsParts:
    """How a policy reads observations of ``space``."""

    space: spaces.Space[Any]
    model_space: spaces.Space[Any]
    """The space of what the model is given."""
    leaf: str | None
    """The one leaf the model reads as it is, or None (a plain observation, or encoded leaves)."""
    masked: bool
    """The observation carries an ``action_mask``."""
    leaves: Leaves = ()
    """A Dict or Tuple observation's leaves by path, in the space's order (empty: a plain one)."""
    encoded: Leaves = ()
    """The leaves the model reads encoded and concatenated (when no single ``leaf`` is read)."""

    @property
    def images(self) -> ImageSlices:
        """``(offset, shape)`` of each ``uint8`` image leaf (a 3-D Box) in the encoded input, in
        the space's order: what the default model reads through a CNN. Empty when the model
        reads a single leaf (a lone image is the model's whole input) or no leaf is an image."""
        found: list[tuple[int, tuple[int, ...]]] = []
        offset = 0
        for _, leaf in self.encoded:
            if isinstance(leaf, spaces.Box) and len(leaf.shape) == 3 and leaf.dtype == np.uint8:
                found.append((offset, tuple(leaf.shape)))
            offset += encoded_size(leaf)
        return tuple(found)

    @property
    def paths(self) -> tuple[str, ...]:
        """The leaves' paths (the batch's ``obs/<path>`` columns)."""
        return tuple(path for path, _ in self.leaves)

    def batch_input(self, batch: Mapping[str, np.ndarray], column: str = "obs") -> np.ndarray:
        """The model's input for a batch's ``column`` (``obs`` or ``new_obs``; its leaf columns
        ``obs/<path>`` for a Dict or Tuple observation): what a learner feeds the model."""
        if not self.leaves:
            return batch[column]
        return self.model_input({path: batch[f"{column}/{path}"] for path in self.paths})

    def model_input(self, columns: Mapping[str, np.ndarray]) -> np.ndarray:
        """The model's input for a batch of observations given as leaf path -> rows."""
        if self.leaf is not None:
            return columns[self.leaf]
        return np.concatenate([encode_leaf(space, columns[path]) for path, space in self.encoded], axis=1)


def leaf_spaces(space: spaces.Space[Any], prefix: str = "") -> Leaves:
    """The leaves of a Dict/Tuple space by path; ``ValueError`` naming a leaf that is not an array."""
    if isinstance(space, spaces.Dict | spaces.Tuple):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
        found: list[tuple[str, spaces.Space[Any]]] = []
        for key, child in items:
            found.extend(leaf_spaces(child, f"{prefix}{key}/"))
        return tuple(found)
    path = prefix[:-1]
    if not isinstance(space, _LEAVES):
        raise ValueError(
            f"unsupported observation leaf '{path}': {space}: leaves may be Box, Discrete, MultiDiscrete or "
            f"MultiBinary ({_HINT})"
        )
    return ((path, space),)


def leaf_values(obs: Any, paths: tuple[str, ...]) -> dict[str, Any]:
    """Leaf path -> value of a (batched or single) Dict/Tuple observation."""
    out: dict[str, Any] = {}
    for path in paths:
        value = obs
        for key in path.split("/"):
            value = value[key] if isinstance(value, Mapping) else value[int(key)]
        out[path] = value
    return out


def obs_parts(space: spaces.Space[Any], action_space: spaces.Space[Any]) -> ObsParts:
    """The parts of ``space``; ``ValueError`` naming the space or leaf this cannot read."""
    if not isinstance(space, spaces.Dict | spaces.Tuple):
        if not isinstance(space, _LEAVES):
            raise ValueError(
                f"unsupported observation space {space}: observations may be Box, Discrete, MultiDiscrete, "
                f"MultiBinary, or a Dict or Tuple of these ({_HINT})"
            )
        return ObsParts(space, space, None, False)
    leaves = leaf_spaces(space)
    top = dict(space.spaces) if isinstance(space, spaces.Dict) else {}
    masked = MASK_KEY in top
    if masked:
        _check_mask(top[MASK_KEY], action_space)
    read = tuple((path, leaf) for path, leaf in leaves if not (masked and path == MASK_KEY))
    if not read:
        raise ValueError(f"observation space {space} has no leaf besides '{MASK_KEY}' for the model to read")
    if len(read) == 1 and read[0][0] in top and isinstance(read[0][1], _MODEL_LEAVES):
        path, leaf = read[0]
        return ObsParts(space, _model_space(leaf), path, masked, leaves)
    size = sum(encoded_size(leaf) for _, leaf in read)
    return ObsParts(space, spaces.Box(-np.inf, np.inf, (size,), np.float32), None, masked, leaves, read)


def encoded_size(space: spaces.Space[Any]) -> int:
    """Entries of a leaf's encoding (one-hot for Discrete and MultiDiscrete)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(space.nvec.sum())
    return math.prod(space.shape or ())


def encode_leaf(space: spaces.Space[Any], rows: np.ndarray) -> np.ndarray:
    """A batch of one leaf's values as float32 ``(rows, encoded_size)``."""
    rows = np.asarray(rows)
    n = len(rows)
    if isinstance(space, spaces.Discrete):
        out = np.zeros((n, int(space.n)), np.float32)
        out[np.arange(n), rows.astype(np.int64) - int(space.start)] = 1.0
        return out
    if isinstance(space, spaces.MultiDiscrete):
        nvec = space.nvec.reshape(-1).astype(np.int64)
        offsets = np.r_[0, np.cumsum(nvec)[:-1]]
        out = np.zeros((n, int(nvec.sum())), np.float32)
        np.put_along_axis(out, rows.reshape(n, -1).astype(np.int64) + offsets, 1.0, axis=1)
        return out
    flat = rows.reshape(n, -1).astype(np.float32)
    if isinstance(space, spaces.Box) and space.dtype == np.uint8:
        flat *= np.float32(1.0 / 255.0)
    return flat


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


def check_masks(mask: np.ndarray, agents: list[Any], kind: str = "agent") -> None:
    """``ValueError`` naming the first agent whose mask allows no action (rows of ``mask`` are ``agents``;
    ``kind`` prefixes the name, "" for names that say what they are, like ``sub-env 3``)."""
    empty = ~mask.any(axis=1)
    if empty.any():
        agent = agents[int(np.flatnonzero(empty)[0])]
        who = f"{kind} {agent!r}" if kind else str(agent)
        raise ValueError(f"{who}: its {MASK_KEY} allows no action (all zeros), so it cannot act")

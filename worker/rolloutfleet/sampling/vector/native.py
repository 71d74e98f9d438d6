"""``vectorization: vector``: the env's own batched implementation (gymnasium's
``vector_entry_point``: ale-py's Atari, for one), built by ``gym.make_vec``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from rolloutfleet.sampling.vector.choice import has_vector_entry_point
from rolloutfleet.spec.job import EnvSpec, SpecError


def make_native(spec: EnvSpec) -> VectorEnv[Any, Any, Any]:
    """``spec.env.num_envs`` sub-envs of the id's own vector env; a SpecError naming the field
    for an id without one."""
    assert spec.id is not None
    if not has_vector_entry_point(spec.id):
        raise SpecError(f"spec.env.vectorization: {spec.id!r} has no vector entry point; use 'sync' or 'async'")
    return gym.make_vec(spec.id, num_envs=spec.num_envs, vectorization_mode="vector_entry_point", **spec.config)


def native_seed_bits(spec: EnvSpec) -> int | None:
    """ale-py's vector env seeds sub-env i with seed + i, as C++ ints: 30 bits of seed."""
    return 30 if spec.id is not None and spec.id.startswith("ALE/") else None

"""The registry of vector env backends: ``spec.env.vectorization``'s value -> how a worker's
vector env of that kind is built. :func:`rolloutfleet.sampling.vector.make.make_vector_env` builds
through it, after :mod:`.choice` resolved ``auto``.

A backend is a :class:`Backend`: its ``build`` gets the :class:`Build` (the spec, the
worker's place, the choice, a sub-env creator) and returns a gymnasium ``VectorEnv``;
``guarded`` says whether the env's resets (and, with ``check_obs``, its observations) are
checked by the caller's guard, as a vector env that is not ours needs. Modules with heavy
imports (EnvPool) are imported when their backend builds, not before.

    >>> sorted(BACKENDS)
    ['async', 'envpool', 'sync', 'vector']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gymnasium import Env
from gymnasium.vector import VectorEnv

from rolloutfleet.sampling.env.failures import FailureBudget, env_name
from rolloutfleet.sampling.vector.choice import VectorChoice
from rolloutfleet.spec.job import EnvSpec, SpecError


@dataclass(frozen=True)
class Build:
    """What a backend builds from."""

    spec: EnvSpec
    worker_index: int
    num_workers: int
    choice: VectorChoice
    create: Callable[[int], Env[Any, Any]] | None
    """Sub-env ``i`` of this worker (seeded, wrapped), for a backend that steps sub-envs of
    ours (:attr:`Backend.sub_envs`); None for the others."""
    info_keys: Sequence[str] = ()
    """``sampling.infos``: the step info entries a backend that can passes on."""


@dataclass(frozen=True)
class Backend:
    build: Callable[[Build], VectorEnv[Any, Any, Any]]
    sub_envs: bool = False
    """It steps sub-envs of ours (``Build.create``); else the env's id names its own pool."""
    guarded: bool = True
    """The caller wraps it in its reset guard (errors named, seeds bounded)."""
    check_obs: bool = False
    """The guard also checks its observations (no sub-env of ours saw them first)."""
    seed_bits: Callable[[EnvSpec], int | None] = lambda spec: None
    """How many bits of seed the env takes (None: any)."""


def _sync(build: Build) -> VectorEnv[Any, Any, Any]:
    from rolloutfleet.sampling.vector.sync import ResilientSyncVectorEnv

    spec, create = build.spec, _sub_envs(build)
    budget = FailureBudget(spec.max_consecutive_failures, env_name(spec), spec.restart_failed_sub_envs)
    return ResilientSyncVectorEnv(create, spec.num_envs, restart_failed=spec.restart_failed_sub_envs,
                                  budget=budget, info_keys=build.info_keys)  # fmt: skip


def _processes(build: Build) -> VectorEnv[Any, Any, Any]:
    from rolloutfleet.sampling.vector.processes import ProcessVectorEnv

    return ProcessVectorEnv(_sub_envs(build), build.spec.num_envs, build.choice.processes)


def _sub_envs(build: Build) -> Callable[[int], Env[Any, Any]]:
    if build.create is None:
        raise ValueError("this backend steps sub-envs of ours: Backend(sub_envs=True)")
    return build.create


def _envpool(build: Build) -> VectorEnv[Any, Any, Any]:
    from rolloutfleet.sampling.vector.envpool import EnvPoolVectorEnv  # imports envpool: only when asked

    return EnvPoolVectorEnv(build.spec)


def _native(build: Build) -> VectorEnv[Any, Any, Any]:
    from rolloutfleet.sampling.vector.native import make_native

    return make_native(build.spec)


def _native_seed_bits(spec: EnvSpec) -> int | None:
    from rolloutfleet.sampling.vector.native import native_seed_bits

    return native_seed_bits(spec)


BACKENDS: dict[str, Backend] = {
    "sync": Backend(_sync, sub_envs=True, guarded=False),  # its own restarts and checks, sub-env by sub-env
    "async": Backend(_processes, sub_envs=True),
    "envpool": Backend(_envpool, check_obs=True),
    "vector": Backend(_native, check_obs=True, seed_bits=_native_seed_bits),
}
"""Every backend by its ``spec.env.vectorization`` name (``auto`` is a choice among them)."""


def backend(mode: str) -> Backend:
    """The backend named ``mode``; a SpecError naming the field and the known names."""
    found = BACKENDS.get(mode)
    if found is None:
        raise SpecError(f"spec.env.vectorization: no backend {mode!r}; known: {', '.join(sorted(BACKENDS))}")
    return found

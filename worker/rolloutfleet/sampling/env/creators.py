"""Building one sub-env from a spec: a gymnasium id or an entry point called with an
:class:`EnvContext`, inside ``spec.env.wrappers``; seeds per worker and sub-env; build errors
as one line naming the field."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from rolloutfleet.sampling.env.calls import watched_creator
from rolloutfleet.sampling.env.wrappers import apply_wrappers, register_namespace
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import EnvSpec, SpecError


class EnvContext(dict[str, Any]):
    """The env config handed to an entry point, plus where the env lives (like RLlib's).

    >>> ctx = EnvContext({"size": 3}, worker_index=1, vector_index=0, num_workers=2)
    >>> ctx["size"], ctx.worker_index
    (3, 1)
    """

    def __init__(self, config: dict[str, Any], worker_index: int, vector_index: int, num_workers: int) -> None:
        super().__init__(config)
        self.worker_index = worker_index
        self.vector_index = vector_index
        self.num_workers = num_workers


def derive_seed(seed: int | None, *path: int) -> int | None:
    """A seed for (worker, sub-env, ...) that differs for every path, or None when unseeded."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


def episode_id_base(worker_index: int) -> int:
    """High bits of this worker's ``eps_id``s: the worker index and a random number, so ids
    stay unique across workers and across restarts of the same worker (add a counter)."""
    return (worker_index << 44) | (secrets.randbits(20) << 24)


def env_creator(spec: EnvSpec, worker_index: int, num_workers: int) -> Callable[[int], gym.Env[Any, Any]]:
    """A function building sub-env ``vector_index`` of this worker (inside ``spec.wrappers``)."""
    create = _bare_creator(spec, worker_index, num_workers)
    if not spec.wrappers:
        return watched_creator(create)
    wrappers = list(spec.wrappers)

    def create_wrapped(vector_index: int) -> gym.Env[Any, Any]:
        return apply_wrappers(create(vector_index), wrappers)

    return watched_creator(create_wrapped)


def _bare_creator(spec: EnvSpec, worker_index: int, num_workers: int) -> Callable[[int], gym.Env[Any, Any]]:
    if spec.entry_point is not None:
        make = load_entry_point(spec.entry_point, "spec.env.entryPoint")

        def create(vector_index: int) -> gym.Env[Any, Any]:
            env = make(EnvContext(dict(spec.config), worker_index, vector_index, num_workers))
            if not isinstance(env, gym.Env):
                raise SpecError(
                    f"spec.env.entryPoint: {spec.entry_point} returned a {type(env).__name__}, not a gymnasium.Env"
                )
            return env

        return create
    env_id = spec.id
    assert env_id is not None  # guaranteed by EnvSpec's validator
    register_namespace(env_id)

    def create_registered(vector_index: int) -> gym.Env[Any, Any]:
        register_namespace(env_id)  # again in an async subprocess that did not fork from here
        return gym.make(env_id, **spec.config)

    return create_registered


@contextlib.contextmanager
def env_build_errors(spec: EnvSpec, field: str | None = None) -> Iterator[None]:
    """Whatever building the env raises becomes one :class:`SpecError` line naming the field
    (``field``, else ``spec.env.id`` or ``spec.env.entryPoint``): for the operator, not a traceback."""
    field = field or ("spec.env.id" if spec.id is not None else "spec.env.entryPoint")
    try:
        yield
    except SpecError:
        raise
    except gym.error.Error as exc:
        raise SpecError(f"{field}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
        raise SpecError(f"{field}: building the environment failed: {type(exc).__name__}: {exc}") from None

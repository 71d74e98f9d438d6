"""The worker's vector env, built from a spec in one of four vectorizations
(``spec.env.vectorization``: ``vector``, the env's own batched implementation; ``sync``,
:mod:`~rolloutfleet.sampling.vector.sync`; ``async``, env processes,
:mod:`~rolloutfleet.sampling.vector.processes`; ``envpool``, :mod:`~rolloutfleet.sampling.vector.envpool`),
and a sub-env's spaces. The parts: one sub-env (:mod:`~rolloutfleet.sampling.env.creators`),
the choice (:mod:`~rolloutfleet.sampling.vector.choice`), failures
(:mod:`~rolloutfleet.sampling.env.failures`); their public names are importable from here too.
Each mode, failing envs and autoreset: docs/guides/heavy-envs.md ("The four vectorizations").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from rolloutfleet.sampling.env.calls import ENV_CALL
from rolloutfleet.sampling.env.creators import (
    EnvContext,
    derive_seed,
    env_build_errors,
    env_creator,
    episode_id_base,
)
from rolloutfleet.sampling.env.failures import (
    EnvFailed,
    EnvInterrupted,
    FailureBudget,
    describe,
    env_name,
    interrupt_failing_envs,
    reset_or_fail,
    stop_requested,
)
from rolloutfleet.sampling.env.obs_check import obs_problem
from rolloutfleet.sampling.vector.backends import Build, backend
from rolloutfleet.sampling.vector.choice import (
    AUTO_ASYNC_STEP_S,
    VectorChoice,
    choose_vectorization,
    has_vector_entry_point,
    measure_step_seconds,
    plan_vectorization,
    worker_cpus,
)
from rolloutfleet.sampling.vector.sync import FAILED, ResilientSyncVectorEnv
from rolloutfleet.spec.job import EnvSpec

__all__ = [
    "AUTO_ASYNC_STEP_S",
    "FAILED",
    "EnvContext",
    "EnvFailed",
    "EnvInterrupted",
    "FailureBudget",
    "ResetGuard",
    "ResilientSyncVectorEnv",
    "VectorChoice",
    "choose_vectorization",
    "derive_seed",
    "describe",
    "env_build_errors",
    "env_creator",
    "env_name",
    "env_spaces",
    "episode_id_base",
    "has_vector_entry_point",
    "interrupt_failing_envs",
    "make_vector_env",
    "measure_step_seconds",
    "plan_vectorization",
    "reset_or_fail",
    "stop_requested",
    "worker_cpus",
]


def env_spaces(
    spec: EnvSpec, worker_index: int, num_workers: int, reset: bool = False
) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """A sub-env's observation and action spaces: EnvPool's from its spec (building a pool
    takes seconds), an env's own vector env's (ale-py's preprocesses and stacks frames), else
    those of one sub-env, built and closed; with ``reset``, after checking that its first
    observation is one of its space (:class:`EnvFailed` when not)."""
    mode = choose_vectorization(spec)
    if mode == "envpool":
        from rolloutfleet.sampling.vector.envpool import EnvPoolVectorEnv

        with ENV_CALL.calling("constructor"):
            pool = EnvPoolVectorEnv(spec)
        return pool.single_observation_space, pool.single_action_space
    if mode == "vector":
        vec = make_vector_env(spec.model_copy(update={"num_envs": 1}), worker_index, num_workers)
        try:
            if reset:
                vec.reset(seed=0)  # the ResetGuard checks its observations
            return vec.single_observation_space, vec.single_action_space
        finally:
            vec.close()
    env = env_creator(spec, worker_index, num_workers)(0)
    try:
        if reset:
            obs, _ = reset_or_fail(env.reset, env_name(spec), "sub-env 0", seed=0)
            if (problem := obs_problem(env.observation_space, obs)) is not None:
                raise EnvFailed(f"{env_name(spec)}: reset returned {problem}")
        return env.observation_space, env.action_space
    finally:
        env.close()


def make_vector_env(
    spec: EnvSpec,
    worker_index: int,
    num_workers: int,
    choice: VectorChoice | None = None,
    info_keys: Sequence[str] = (),
) -> VectorEnv[Any, Any, Any]:
    """Build the worker's vector env as ``choice`` says (default: :func:`plan_vectorization`
    without ``resources.cpu``); every failure becomes a SpecError naming the field.
    ``info_keys`` (``sampling.infos``): the step info entries a sync vector env passes on."""
    if choice is None:
        choice = plan_vectorization(spec, worker_index, num_workers)
    made = backend(choice.mode)
    with env_build_errors(spec), ENV_CALL.calling("constructor"):  # sync and async name the sub-env
        create = env_creator(spec, worker_index, num_workers) if made.sub_envs else None
        vec = made.build(Build(spec, worker_index, num_workers, choice, create, info_keys))
        if not made.guarded:
            return vec
        return ResetGuard(vec, spec, seed_bits=made.seed_bits(spec), check_obs=made.check_obs)


class ResetGuard(VectorWrapper):
    """A vector env whose ``reset`` errors become :class:`EnvFailed` naming the env (``vector``,
    ``async`` and ``envpool`` modes; their step errors are the runner's to count). With
    ``check_obs`` (``vector``, ``envpool``: no sub-env of ours sees their observations first),
    what ``reset`` returns that is no batch of observations is :class:`EnvFailed` too, and what
    ``step`` returns so is a ``ValueError`` (the runner counts it as the vector env's failure):
    :func:`obs_problem` against the batch of ``single_observation_space``, about a microsecond."""

    def __init__(
        self, env: VectorEnv[Any, Any, Any], spec: EnvSpec, seed_bits: int | None = None, check_obs: bool = False
    ) -> None:
        super().__init__(env)
        self._name = env_name(spec)
        self._seed_bits = seed_bits
        self._batch_space = batch_space(env.single_observation_space, env.num_envs) if check_obs else None

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._seed_bits is not None and isinstance(seed, int):
            seed %= 2**self._seed_bits
        with ENV_CALL.calling("reset"):
            result = reset_or_fail(self.env.reset, self._name, "the vector env", seed=seed, options=options)
        obs = result[0] if isinstance(result, tuple) and result else result
        if self._batch_space is not None and (problem := obs_problem(self._batch_space, obs)) is not None:
            raise EnvFailed(f"{self._name}: the vector env's reset returned {problem}")
        return cast("tuple[Any, dict[str, Any]]", result)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        with ENV_CALL.calling("step"):  # async names the sub-env
            result = self.env.step(actions)
        if self._batch_space is not None and (problem := obs_problem(self._batch_space, result[0])) is not None:
            raise ValueError(f"the vector env's step returned {problem}")
        return result

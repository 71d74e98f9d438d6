"""``sync`` vectorization: sub-envs stepped one after another in the worker process, and a
sub-env that raises closed and recreated without disturbing the others."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from rolloutfleet.sampling.env.calls import ENV_CALL
from rolloutfleet.sampling.env.failures import EnvFailed, FailureBudget, describe, reset_or_fail
from rolloutfleet.sampling.env.obs_check import obs_problem
from rolloutfleet.sampling.info_columns import stack_infos
from rolloutfleet.spec.job import SpecError

log = logging.getLogger(__name__)

FAILED = "_rolloutfleet_env_failed"
"""Info key of :class:`ResilientSyncVectorEnv`: boolean mask of sub-envs recreated this step."""


def _copy(obs: Any) -> Any:
    """A batch of observations the next step will not overwrite (a Dict/Tuple's arrays too)."""
    return obs.copy() if isinstance(obs, np.ndarray) else deepcopy(obs)


class ResilientSyncVectorEnv(VectorEnv[Any, Any, Any]):
    """Sub-envs stepped one after another in this process, SAME_STEP autoreset.

    Unlike gymnasium's ``SyncVectorEnv``, a sub-env whose ``step`` raises does not take the
    others down: it is closed, rebuilt with the same creator and reset, and the step
    reports it in ``info[FAILED]`` (its row is not a transition). RLlib calls this
    ``restart_failed_sub_environments``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        create: Callable[[int], gym.Env[Any, Any]],
        num_envs: int,
        restart_failed: bool = True,
        budget: FailureBudget | None = None,
        info_keys: Sequence[str] = (),
    ) -> None:
        self._create = create
        self.info_keys = tuple(info_keys)  # sampling.infos: the step info entries passed on
        self.restart_failed = restart_failed
        self.failures = budget or FailureBudget(3, "spec.env", restart_failed)
        self.envs = [create(i) for i in range(num_envs)]
        self.num_envs = num_envs
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        for index, env in enumerate(self.envs[1:], start=1):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise SpecError(f"spec.env: sub-env {index} has different spaces than sub-env 0")
        # Checked per step: what is not an observation of it fails its sub-env (not the vector step).
        self._space = first.observation_space
        self.observation_space = batch_space(first.observation_space, num_envs)
        self.action_space = batch_space(first.action_space, num_envs)
        self._obs: Any = create_empty_array(first.observation_space, num_envs)
        self._seeds: list[int | None] = [None] * num_envs
        self.restarts = 0

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        seeds = seed if isinstance(seed, list) else [None if seed is None else seed + i for i in range(self.num_envs)]
        self._seeds = list(seeds)
        observations = []
        for i, (env, env_seed) in enumerate(zip(self.envs, seeds, strict=True)):
            with ENV_CALL.calling("reset", i):
                observations.append(self._reset(env, i, seed=env_seed, options=options))
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        return _copy(self._obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        n = self.num_envs
        rewards = np.zeros(n, np.float64)
        terminateds = np.zeros(n, np.bool_)
        truncateds = np.zeros(n, np.bool_)
        failed = np.zeros(n, np.bool_)
        final_obs: list[Any] = [None] * n
        infos: list[Any] | None = [None] * n if self.info_keys else None
        observations = []
        failures, space = self.failures, self._space
        try:
            for i, env in enumerate(self.envs):
                ENV_CALL.begin("step", i)
                try:
                    obs, reward, terminated, truncated, env_info = env.step(actions[i])
                    rewards[i], terminateds[i], truncateds[i] = reward, terminated, truncated
                    if infos is not None:
                        infos[i] = env_info
                    if (problem := obs_problem(space, obs)) is not None:
                        raise ValueError(f"step returned {problem}")
                except Exception as exc:  # noqa: BLE001 - counted: recreated, or the end of the worker
                    rewards[i], terminateds[i], truncateds[i] = 0.0, False, False
                    failures.failed(i, exc)
                    log.warning("sub-env %d raised %s: %s; recreating it", i, type(exc).__name__, exc)
                    obs = self._recreate(i)
                    failed[i] = True
                    observations.append(obs)
                    continue
                if failures.streak:
                    failures.succeeded(i)
                if terminated or truncated:
                    final_obs[i] = obs
                    ENV_CALL.begin("reset", i)
                    obs = self._reset(env, i)
                observations.append(obs)
        finally:
            ENV_CALL.end()  # the policy's time between steps is no env call
        self._obs = concatenate(self.single_observation_space, observations, self._obs)
        info: dict[str, Any] = {} if infos is None else stack_infos(infos, self.info_keys)
        ended = terminateds | truncateds
        if ended.any():
            info["final_obs"] = np.array(final_obs, dtype=object)
            info["_final_obs"] = ended
        if failed.any():
            info[FAILED] = failed
        return _copy(self._obs), rewards, terminateds, truncateds, info

    def _recreate(self, index: int) -> Any:
        try:
            self.envs[index].close()
        except Exception:
            log.debug("closing failed sub-env %d raised", index, exc_info=True)
        self.restarts += 1
        name = self.failures.name
        try:
            env = self.envs[index] = self._create(index)
        except Exception as exc:  # noqa: BLE001 - one line for the operator, not a traceback
            raise EnvFailed(f"{name}: recreating sub-env {index} failed: {describe(exc)}") from None
        seed = self._seeds[index]
        seed = None if seed is None else seed + 7919 * self.restarts
        with ENV_CALL.calling("reset", index):
            return self._reset(env, index, seed=seed)

    def _reset(self, env: gym.Env[Any, Any], index: int, **kwargs: Any) -> Any:
        """The sub-env's first observation; :class:`EnvFailed` when reset raises or returns none."""
        obs, _ = reset_or_fail(env.reset, self.failures.name, f"sub-env {index}", **kwargs)
        if (problem := obs_problem(self._space, obs)) is not None:
            raise EnvFailed(f"{self.failures.name}: sub-env {index} reset returned {problem}")
        return obs

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()

"""The registry of vector env backends: a new backend is one module plus one entry in
``BACKENDS`` (shown by registering a toy one, here in the test), and every built-in backend
is built through it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv, VectorEnv

from rolloutfleet.sampling.vector import backends
from rolloutfleet.sampling.vector.backends import BACKENDS, Backend, Build, backend
from rolloutfleet.sampling.vector.choice import VectorChoice
from rolloutfleet.sampling.vector.make import EnvFailed, ResetGuard, make_vector_env
from rolloutfleet.sampling.vector.processes import ProcessVectorEnv
from rolloutfleet.sampling.vector.sync import ResilientSyncVectorEnv
from rolloutfleet.spec.job import EnvSpec, SpecError

CARTPOLE = EnvSpec.model_validate({"id": "CartPole-v1", "numEnvs": 3})


def toy(build: Build) -> VectorEnv[Any, Any, Any]:
    """A backend of the test's own: gymnasium's plain SyncVectorEnv over our sub-envs."""
    assert build.create is not None
    return SyncVectorEnv([lambda i=i: build.create(i) for i in range(build.spec.num_envs)])  # type: ignore[misc]


def test_a_backend_registered_in_one_entry_builds_guarded_and_steps_the_envs_own_dynamics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(BACKENDS, "toy", Backend(toy, sub_envs=True, check_obs=True))
    vec = make_vector_env(CARTPOLE, 0, 1, choice=VectorChoice("toy", sub_envs=3))
    try:
        assert isinstance(vec, ResetGuard) and vec.num_envs == 3
        obs, _ = vec.reset(seed=7)
        # The same sub-envs a lone CartPole makes: its reset state, seeded as the worker seeds sub-env 0.
        lone = gym.make("CartPole-v1")
        first, _ = lone.reset(seed=int(vec.unwrapped.envs[0].np_random_seed))
        np.testing.assert_array_equal(obs[0], first)
        _, rewards, *_ = vec.step(np.zeros(3, np.int64))
        assert rewards.tolist() == [1.0, 1.0, 1.0]  # CartPole pays 1 a step
    finally:
        vec.close()


def test_a_guarded_backend_s_reset_that_breaks_is_an_env_failure_naming_the_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Broken(SyncVectorEnv):
        def reset(self, **kwargs: Any) -> Any:
            raise RuntimeError("the simulator is not answering")

    def broken(build: Build) -> VectorEnv[Any, Any, Any]:
        assert build.create is not None
        return Broken([lambda: build.create(0)])  # type: ignore[misc]

    monkeypatch.setitem(BACKENDS, "broken", Backend(broken, sub_envs=True))
    vec = make_vector_env(CARTPOLE.model_copy(update={"num_envs": 1}), 0, 1, choice=VectorChoice("broken"))
    with pytest.raises(EnvFailed, match=r"CartPole-v1.*the simulator is not answering"):
        vec.reset(seed=0)
    vec.close()


def test_the_built_in_backends_come_from_the_registry() -> None:
    assert sorted(BACKENDS) == ["async", "envpool", "sync", "vector"]
    sync = make_vector_env(CARTPOLE, 0, 1, choice=VectorChoice("sync", sub_envs=3))
    assert isinstance(sync, ResilientSyncVectorEnv)
    sync.close()
    processes = make_vector_env(CARTPOLE, 0, 1, choice=VectorChoice("async", processes=1, sub_envs=3))
    try:
        assert isinstance(processes, ResetGuard) and isinstance(processes.env, ProcessVectorEnv)
    finally:
        processes.close()


def test_an_unknown_backend_names_the_field_and_the_known_ones() -> None:
    with pytest.raises(
        SpecError, match=r"spec\.env\.vectorization: no backend 'gpu'; known: async, envpool, sync, vector"
    ):
        backend("gpu")
    assert backends.backend("sync") is BACKENDS["sync"]

"""``spec.env.vectorization: envpool``: EnvPool's C++ vector env behind gymnasium's VectorEnv API.

EnvPool (the ``envpool`` extra) steps all sub-envs in C++ threads. Its gymnasium pools
autoreset in NEXT_STEP mode (the step after an episode's end returns the next episode's
first observation and is not a transition), which the runner handles as for gymnasium's
own vector envs, so batches keep their semantics: no row crosses an episode boundary, and
the ``new_obs`` of an ending row is the true final observation.

Ids: EnvPool's own (``Pong-v5``, ``Hopper-v4``, ``CartPole-v1``; ``envpool.list_all_envs()``),
and gymnasium's Atari ids (``ALE/Pong-v5`` is EnvPool's ``Pong-v5``). ``spec.env.config``
goes to ``envpool.make`` (Atari: ``stack_num``, ``img_height``, ``episodic_life``,
``reward_clip``, ``repeat_action_probability``, ...; EnvPool's Atari preprocesses by
itself, grayscale 84x84 frames stacked by 4 by default, so ``spec.env.wrappers`` is refused).

Seeds: EnvPool seeds a pool when it is built (sub-env i gets seed + i) and ignores seeds
given to ``reset``, so the pool is built at the first ``reset`` (and again at a ``reset``
with a seed), from the first seed given; the spaces come from EnvPool's spec, without a pool.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rolloutfleet.spec.job import EnvSpec, SpecError

_ATARI_NAMESPACE = "ALE/"


def _envpool() -> Any:
    try:
        import envpool
    except ImportError:
        raise SpecError(
            "spec.env.vectorization: 'envpool' needs the envpool package (pip install 'rolloutfleet[envpool]')"
        ) from None
    return envpool


def envpool_task_id(env_id: str) -> str:
    """EnvPool's id for ``env_id``: gymnasium's Atari ids lose their namespace (``ALE/Pong-v5`` -> ``Pong-v5``)."""
    return env_id.removeprefix(_ATARI_NAMESPACE)


def check_envpool_id(env_id: str) -> str:
    """EnvPool's id for ``env_id``, or one line saying that EnvPool does not have it."""
    envpool = _envpool()
    task_id = envpool_task_id(env_id)
    if task_id not in envpool.list_all_envs():
        raise SpecError(
            f"spec.env.vectorization: EnvPool has no env {env_id!r} (it has Atari games as 'Pong-v5' or "
            "'ALE/Pong-v5', MuJoCo as 'Hopper-v4', classic control as 'CartPole-v1': envpool.list_all_envs()); "
            "use 'sync', 'async' or 'vector'"
        )
    return task_id


class EnvPoolVectorEnv(VectorEnv[Any, Any, Any]):
    """An EnvPool pool of ``spec.num_envs`` sub-envs, built at the first reset."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, spec: EnvSpec) -> None:
        assert spec.id is not None  # EnvSpec refuses envpool with an entry point
        self._envpool = _envpool()
        self.task_id = check_envpool_id(spec.id)
        self.num_envs = spec.num_envs
        self._config = dict(spec.config)
        try:
            pool_spec = self._envpool.make_spec(self.task_id, num_envs=spec.num_envs, **self._config)
        except Exception as exc:  # noqa: BLE001 - EnvPool's complaint about a config key, in one line
            raise SpecError(
                f"spec.env.config: EnvPool's {self.task_id} refuses it: {type(exc).__name__}: {exc}"
            ) from None
        self.single_observation_space = pool_spec.gymnasium_observation_space
        self.single_action_space = pool_spec.gymnasium_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._pool: Any = None

    def reset(
        self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        first = seed[0] if isinstance(seed, list) else seed
        if self._pool is None or first is not None:
            self._build(secrets.randbits(31) if first is None else int(first) % 2**31)
        obs, _ = self._pool.reset()
        return obs, {}

    def _build(self, seed: int) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = self._envpool.make(
            self.task_id, env_type="gymnasium", num_envs=self.num_envs, seed=seed, **self._config
        )

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, rewards, terminateds, truncateds, _ = self._pool.step(np.asarray(actions))
        return obs, rewards, terminateds, truncateds, {}

    def close_extras(self, **kwargs: Any) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

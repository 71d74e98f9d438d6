"""Environments that misbehave on purpose, built through entry points (pkg.module:fn):
NaN observations and rewards, a ``step`` or ``reset`` that always raises."""

from __future__ import annotations

import gc
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class NanEnv(gym.Env[np.ndarray, np.int64]):
    """obs ~ N(3, 1) in 3 dims, 20-step episodes; sub-env ``nan_env`` returns a NaN in its
    observation (and, with ``nan_reward``, a NaN reward) every ``nan_every`` steps."""

    def __init__(self, ctx: Any) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        index = getattr(ctx, "vector_index", 0)
        self.poisoned = index == int(ctx.get("nan_env", 0)) and getattr(ctx, "worker_index", 0) == int(
            ctx.get("nan_worker", 0)
        )
        self.nan_every = int(ctx.get("nan_every", 7))
        self.nan_reward = bool(ctx.get("nan_reward", False))
        self.rng = np.random.default_rng(index)
        self.steps = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        obs = self.rng.normal(3.0, 1.0, 3).astype(np.float32)
        if self.poisoned and self.steps % self.nan_every == 0:
            obs[1] = np.nan
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        self.t += 1
        bad = self.poisoned and self.steps % self.nan_every == 0
        reward = float("nan") if bad and self.nan_reward else 1.0
        return self._obs(), reward, self.t >= 20, False, {}


def make_nan_env(ctx: Any) -> NanEnv:
    return NanEnv(ctx)


class FailingEnv(gym.Env[np.ndarray, np.int64]):
    """``step`` (or ``reset``, with ``fail: reset``) raises every time, after ``delay`` seconds;
    sub-env ``fail_env`` only, unless ``fail_env`` is ``all``. ``fail: exit`` ends the process
    in ``step`` instead (a crashing simulator; for ``async`` env processes only)."""

    def __init__(self, ctx: Any) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.fail = str(ctx.get("fail", "step"))
        target = ctx.get("fail_env", "all")
        self.broken = target == "all" or getattr(ctx, "vector_index", 0) == int(target)
        self.delay = float(ctx.get("delay", 0.0))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if self.broken and self.fail == "reset":
            raise ConnectionError("simulator at 10.0.0.9:7000 refused the connection")
        return np.zeros(2, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.broken and self.fail == "exit":
            os._exit(7)
        if self.broken and self.fail == "step":
            time.sleep(self.delay)
            raise RuntimeError("physics blew up")
        return np.zeros(2, np.float32), 1.0, False, False, {}


def make_failing_env(ctx: Any) -> FailingEnv:
    return FailingEnv(ctx)


class WrongShapeEnv(FailingEnv):
    """Resets fine; ``step`` returns an observation of shape (5,) in a (2,) space."""

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(5, np.float32), 1.0, False, False, {}


def make_wrong_shape_env(ctx: Any) -> WrongShapeEnv:
    return WrongShapeEnv({**ctx, "fail_env": 0})


def make_failing_reset_at_build(ctx: Any) -> gym.Env[np.ndarray, np.int64]:
    """An entry point whose env cannot be built (its constructor raises)."""
    raise RuntimeError("the simulator's licence server is unreachable")


class NotAnObservationEnv(FailingEnv):
    """Returns ``config.value`` (default ``"hello"``) instead of an observation from
    ``config.when``: ``reset`` or ``step``."""

    def __init__(self, ctx: Any) -> None:
        super().__init__({**ctx, "fail_env": -1})
        self.when = str(ctx.get("when", "reset"))
        self.value = ctx.get("value", "hello")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        return (self.value if self.when == "reset" else np.zeros(2, np.float32)), {}

    def step(self, action: np.int64) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return (self.value if self.when == "step" else np.zeros(2, np.float32)), 1.0, False, False, {}


def make_not_an_observation_env(ctx: Any) -> NotAnObservationEnv:
    return NotAnObservationEnv(ctx)


class HangingEnv(FailingEnv):
    """Sub-env ``hang_env`` never returns from its ``hang`` call (``constructor``, ``reset`` or
    ``step``, the latter after ``after`` good steps): a simulator that deadlocked. It sleeps, in
    Python (``spin``: loops, holding the GIL between switches), after writing its process id to
    the file ``mark`` so a test knows the hang has begun. ``slow``: every step sleeps this long."""

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.fail = "none"
        self.broken = getattr(ctx, "vector_index", 0) == int(ctx.get("hang_env", 0))
        self.hang = str(ctx.get("hang", "step"))
        self.after = int(ctx.get("after", 0))
        self.mark = str(ctx.get("mark", ""))
        self.spin = bool(ctx.get("spin", False))
        self.slow = float(ctx.get("slow", 0.0))
        self.steps = 0
        if self.broken and self.hang == "constructor":
            self._hang()

    def _hang(self) -> None:
        if self.mark:
            with open(self.mark, "w") as file:
                file.write(str(os.getpid()))
        while True:
            if self.spin:
                sum(range(10_000))
            else:
                time.sleep(3600)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if self.broken and self.hang == "reset":
            self._hang()
        return super().reset(seed=seed, options=options)

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.broken and self.hang == "step" and self.steps > self.after:
            self._hang()
        time.sleep(self.slow)
        return super().step(action)


def make_hanging_env(ctx: Any) -> HangingEnv:
    return HangingEnv(ctx)


class NotAnObservationVectorEnv(VectorEnv):  # type: ignore[type-arg]
    """An env's own vector implementation (a ``vector_entry_point``, as a C++ batch env
    might be) that returns ``value`` (default ``"hello"``) for its whole batch of observations
    from ``when``: ``reset`` or ``step``."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 2, when: str = "reset", value: Any = "hello") -> None:
        self.num_envs, self.when, self.value = num_envs, when, value
        self.single_observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def _obs(self, call: str) -> Any:
        return self.value if self.when == call else np.zeros((self.num_envs, 2), np.float32)

    def reset(self, *, seed: Any = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        return self._obs("reset"), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        none = np.zeros(self.num_envs, np.bool_)
        return self._obs("step"), np.ones(self.num_envs), none, none.copy(), {}


gym.register("RolloutFleetNotObsVec-v0", vector_entry_point=NotAnObservationVectorEnv)


class CollectingEnv(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose ``reset`` runs a full garbage collection first, in the process that runs
    it (an env process, with async vectorization): what an env's own allocations may trigger."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def reset(self, **kwargs: Any) -> Any:
        gc.collect()
        return super().reset(**kwargs)


def make_collecting_env(ctx: Any) -> CollectingEnv:
    return CollectingEnv()

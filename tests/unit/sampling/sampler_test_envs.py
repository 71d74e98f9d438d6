"""Small environments for the sampler's tests, built through entry points (pkg.module:fn)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space


class CounterEnv(gym.Env[np.ndarray, np.int64]):
    """obs = [episode id within this env, step]; ends (terminated) after ``length`` steps.

    Raises on step ``fail_at`` of episode ``fail_episode`` when configured, to test
    recreation of failed sub-environments.
    """

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.length = int(ctx.get("length", 5))
        self.fail_episode = ctx.get("fail_episode")
        self.fail_at = ctx.get("fail_at", 2)
        self.fail_env = ctx.get("fail_env", 0)
        self.vector_index = getattr(ctx, "vector_index", 0)
        self.worker_index = getattr(ctx, "worker_index", 0)
        self.observation_space = spaces.Box(0, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(3)
        self.episode = -1
        self.step_count = 0
        self.seen_actions: list[int] = []
        CounterEnv.instances.append(self)

    instances: list[CounterEnv] = []
    failures_left = 0  # tests set this; recreated envs share it, so each crash happens once

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.step_count = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.episode, self.step_count], np.float32)

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if (
            self.fail_episode is not None
            and CounterEnv.failures_left > 0
            and self.vector_index == self.fail_env
            and self.episode == self.fail_episode
            and self.step_count == self.fail_at
        ):
            CounterEnv.failures_left -= 1
            raise RuntimeError("simulated crash")
        self.seen_actions.append(int(action))
        self.step_count += 1
        return self._obs(), float(self.step_count), self.step_count >= self.length, False, {}


def make_counter(ctx: dict[str, Any]) -> CounterEnv:
    return CounterEnv(ctx)


def make_flaky(ctx: dict[str, Any]) -> CounterEnv:
    """Sub-env ``fail_env`` raises once, in its second episode; recreated ones never fail."""
    config = {"length": 5, "fail_episode": 1, "fail_at": 2, "fail_env": 1, **ctx}
    env = CounterEnv(config)
    env.vector_index = getattr(ctx, "vector_index", 0)
    return env


class ClipProbe(gym.Env[np.ndarray, np.ndarray]):
    """Box actions in [-1, 1]; records what the env received."""

    received: list[np.ndarray] = []

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.observation_space = spaces.Box(-1, 1, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ClipProbe.received.append(np.array(action))
        return np.zeros(1, np.float32), 100.0, False, False, {}


def make_clip_probe(ctx: dict[str, Any]) -> ClipProbe:
    return ClipProbe(ctx)


def not_an_env(ctx: dict[str, Any]) -> str:
    return "nope"


class CounterVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` counters with NEXT_STEP autoreset, like gymnasium's own vector envs.

    obs = [episode, step] per sub-env, reward = step, terminated after ``length`` steps
    (``length + spread * i`` for sub-env i). The
    step after an end resets that sub-env (reward 0, not a transition). ``end_on_reset``
    makes the reset step also report ``terminated``, as a careless vector env might.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    failures_left = 0  # tests set this; with ``fail_at``, step number ``fail_at`` raises (once)

    def __init__(
        self, num_envs: int = 1, length: int = 5, end_on_reset: bool = False, spread: int = 0, fail_at: int = -1
    ) -> None:
        self.num_envs, self.end_on_reset, self.fail_at, self.calls = num_envs, end_on_reset, fail_at, 0
        self.length = length + spread * np.arange(num_envs)  # sub-env i: length + spread * i steps
        self.single_observation_space = spaces.Box(0, 1e6, (2,), np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.episode = np.zeros(num_envs, np.int64)
        self.steps = np.zeros(num_envs, np.int64)
        self.prev_done = np.zeros(num_envs, np.bool_)

    def _obs(self) -> np.ndarray:
        return np.stack([self.episode, self.steps], axis=1).astype(np.float32)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.episode[:] = 0
        self.steps[:] = 0
        self.prev_done[:] = False
        return self._obs(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        self.calls += 1
        if self.calls == self.fail_at and CounterVectorEnv.failures_left > 0:
            CounterVectorEnv.failures_left -= 1
            raise RuntimeError("simulated vector env crash")
        resetting = self.prev_done.copy()
        self.steps += 1
        self.episode[resetting] += 1
        self.steps[resetting] = 0
        rewards = np.where(resetting, 0.0, self.steps.astype(np.float64))
        terminated = self.steps >= self.length
        self.prev_done = terminated & ~resetting
        if self.end_on_reset:
            terminated |= resetting
        return self._obs(), rewards, terminated, np.zeros(self.num_envs, np.bool_), {}


gym.register("RolloutFleetCounterVec-v0", vector_entry_point=CounterVectorEnv)


class MaskedCounterEnv(gym.Env[dict[str, np.ndarray], np.int64]):
    """A Dict observation in PettingZoo's classic shape: ``observation`` = [episode, step],
    ``action_mask`` allows actions ``step % 4`` and ``(step + 1) % 4`` only. Ends (terminated)
    after ``length`` steps; reward 1 per legal move. It records every action it saw and
    counts illegal ones (instead of raising, which the runner would take for a crash).
    ``empty_mask_at``: a step whose mask allows nothing (bad input)."""

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.length = int(ctx.get("length", 5))
        self.empty_mask_at = ctx.get("empty_mask_at")
        self.vector_index = getattr(ctx, "vector_index", 0)
        self.observation_space = spaces.Dict(  # type: ignore[assignment]
            {"observation": spaces.Box(0, 1e6, (2,), np.float32), "action_mask": spaces.MultiBinary(4)}
        )
        self.action_space = spaces.Discrete(4)
        self.episode = -1
        self.step_count = 0
        self.seen_actions: list[int] = []
        MaskedCounterEnv.instances.append(self)

    instances: list[MaskedCounterEnv] = []
    illegal = 0

    def mask(self) -> np.ndarray:
        mask = np.zeros(4, np.int8)
        if self.step_count != self.empty_mask_at:
            mask[[self.step_count % 4, (self.step_count + 1) % 4]] = 1
        return mask

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": np.array([self.episode, self.step_count], np.float32), "action_mask": self.mask()}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        self.episode += 1
        self.step_count = 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        legal = bool(self.mask()[int(action)])
        MaskedCounterEnv.illegal += not legal
        self.seen_actions.append(int(action))
        self.step_count += 1
        return self._obs(), float(legal), self.step_count >= self.length, False, {}


def make_masked_counter(ctx: dict[str, Any]) -> MaskedCounterEnv:
    return MaskedCounterEnv(ctx)


def make_text_env(ctx: dict[str, Any]) -> gym.Env[Any, np.int64]:
    """An env observing text: no array to store or encode (bad input)."""
    env = CounterEnv(ctx)
    env.observation_space = spaces.Text(8)  # type: ignore[assignment]
    return env  # type: ignore[return-value]


def make_masked_counter_vec(num_envs: int = 1, length: int = 3) -> VectorEnv[Any, Any, Any]:
    """Masked counters in gymnasium's SyncVectorEnv with NEXT_STEP autoreset (a vector entry
    point), whose final observation allows no action (a finished game has no legal move): the
    runner acts on it in the reset step, which the env ignores."""
    creators = [lambda: MaskedCounterEnv({"length": length, "empty_mask_at": length}) for _ in range(num_envs)]
    return gym.vector.SyncVectorEnv(creators, autoreset_mode=AutoresetMode.NEXT_STEP)


gym.register("RolloutFleetMaskedCounterVec-v0", vector_entry_point=make_masked_counter_vec)


class CameraEnv(gym.Env[dict[str, Any], np.int64]):
    """A Dict observation with an image beside other leaves: ``camera`` (``(10, 12, 3)``
    uint8: a bright column at ``position``, rows shaded by the step), ``gps`` (Box:
    ``[position, step]``) and ``heading`` (Discrete(4): the last action). Action ``a``
    moves the column by ``a - 1`` (action 3 stays); reward 1 when it lands on column 6;
    ``length`` steps an episode (truncated)."""

    WIDTH = 12

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.length = int(ctx.get("length", 7))
        self.observation_space = spaces.Dict(  # type: ignore[assignment]
            {
                "camera": spaces.Box(0, 255, (10, self.WIDTH, 3), np.uint8),
                "gps": spaces.Box(-100.0, 100.0, (2,), np.float32),
                "heading": spaces.Discrete(4),
            }
        )
        self.action_space = spaces.Discrete(4)
        self.position, self.step_count, self.heading = 0, 0, 0

    def _obs(self) -> dict[str, Any]:
        camera = np.zeros((10, self.WIDTH, 3), np.uint8)
        camera[:, :, 2] = np.arange(10, dtype=np.uint8)[:, None] * (self.step_count + 1)
        camera[:, self.position, :2] = 255
        return {
            "camera": camera,
            "gps": np.array([self.position, self.step_count], np.float32),
            "heading": self.heading,
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.position, self.step_count, self.heading = int(self.np_random.integers(self.WIDTH)), 0, 0
        return self._obs(), {}

    def step(self, action: np.int64) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        move = 0 if int(action) == 3 else int(action) - 1
        self.position = min(max(self.position + move, 0), self.WIDTH - 1)
        self.step_count += 1
        self.heading = int(action)
        return self._obs(), float(self.position == 6), False, self.step_count >= self.length, {}


def make_camera(ctx: dict[str, Any]) -> CameraEnv:
    return CameraEnv(ctx)

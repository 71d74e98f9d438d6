"""An env whose ``info`` carries known values, for ``sampling.infos`` (entry point pkg.module:fn)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class InfoEnv(gym.Env[np.ndarray, np.int64]):
    """obs = [sub-env index, step]; ends after ``length`` steps. Each step's info: ``steps`` (int),
    ``pos`` (float32 [step, sub-env index]), ``even`` (bool, only on even steps) and ``flip``
    (an int, a float from the env's step ``flip_at`` on). Every info returned is kept in ``log``."""

    instances: list[InfoEnv] = []

    def __init__(self, ctx: dict[str, Any]) -> None:
        self.length = int(ctx.get("length", 7))
        self.flip_at = int(ctx.get("flip_at", 10**9))
        self.index = getattr(ctx, "vector_index", 0)
        self.observation_space = spaces.Box(0, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.step_count = 0
        self.total = 0
        self.log: list[dict[str, Any]] = []
        InfoEnv.instances.append(self)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.step_count = 0
        return np.array([self.index, 0], np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.step_count += 1
        self.total += 1
        info: dict[str, Any] = {
            "steps": self.step_count,
            "pos": np.array([self.step_count, self.index], np.float32),
            "flip": self.total * 0.5 if self.total >= self.flip_at else self.total,
        }
        if self.step_count % 2 == 0:
            info["even"] = True
        self.log.append(info)
        obs = np.array([self.index, self.step_count], np.float32)
        return obs, 1.0, self.step_count >= self.length, False, info


def make_info_env(ctx: dict[str, Any]) -> InfoEnv:
    return InfoEnv(ctx)

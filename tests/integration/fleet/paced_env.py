"""An environment that takes a fixed wall time per step (a sleep, no CPU): a worker of it
makes a known number of rows per second however many workers share the machine, which
is what the autoscaling tests and the bench size the fleet by.

``config``: ``step_s`` (default 0.002 s per step)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class PacedEnv(gym.Env[np.ndarray, np.int64]):
    def __init__(self, ctx: Any) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.step_s = float(ctx.get("step_s", 0.002))
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict]:
        time.sleep(self.step_s)
        self.t += 1
        return np.full(2, self.t % 2, np.float32), 1.0, False, self.t >= 100, {}


def make(ctx: Any) -> PacedEnv:
    return PacedEnv(ctx)

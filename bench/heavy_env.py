"""A CPU-bound env for the async bench: CartPole whose every step burns a fixed CPU time.

``BurnCartPole`` steps gymnasium's CartPole (same dynamics, same observations), then spins
until the process has used ``burnMs`` more milliseconds of CPU (``time.process_time``): a
stand-in for a physics engine whose step costs milliseconds, and one that measures
parallelism fairly, since a step costs the same CPU time whichever core runs it and however
busy the machine is. Entry point: ``bench.heavy_env:make`` (config ``{"burnMs": 2.0}``).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class BurnCartPole(CartPoleEnv):
    def __init__(self, burn_ms: float = 2.0) -> None:
        super().__init__()
        self.burn_s = burn_ms / 1000.0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        until = time.process_time() + self.burn_s
        while time.process_time() < until:
            pass
        return super().step(action)  # type: ignore[no-untyped-call,return-value]


def make(context: Any) -> gym.Env[Any, Any]:
    """The entry point (``spec.env.entryPoint: bench.heavy_env:make``): config ``burnMs``."""
    return gym.wrappers.TimeLimit(BurnCartPole(float(context.get("burnMs", 2.0))), max_episode_steps=500)

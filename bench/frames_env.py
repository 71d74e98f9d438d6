"""A vector env of Atari-shaped frames that costs almost nothing to step: the GPU bench's
pixel workload, where the policy (a Nature CNN on 4x84x84 uint8 stacks) is what is measured.

``FramesVectorEnv`` serves frame stacks shaped as ``AtariPreprocessing`` +
``FrameStackObservation(4)`` give them (``(4, 84, 84)`` uint8), drawn from a fixed bank of
random stacks (so the env's own cost is one copy of the frames per step, as any pixel env
pays), 6 discrete actions like Pong. Episodes last ``length`` steps, reward 1 per step;
NEXT_STEP autoreset as gymnasium's own vector envs (the step after an end returns the next
episode's first stack, reward 0, not a transition). Registered as ``RolloutFleetFrames-v0``
(vector entry point) when this module is imported.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

SHAPE = (4, 84, 84)
BANK = 32  # distinct stacks: more than a step's sub-envs share, so rows differ


class FramesVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, num_envs: int = 1, length: int = 1000) -> None:
        self.num_envs, self.length = num_envs, length
        self.single_observation_space = spaces.Box(0, 255, SHAPE, np.uint8)
        self.single_action_space = spaces.Discrete(6)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._bank = np.random.default_rng(0).integers(0, 256, (BANK, *SHAPE), dtype=np.uint8)
        self._steps = np.zeros(num_envs, np.int64)
        self._prev_done = np.zeros(num_envs, np.bool_)
        self._tick = 0

    def _frames(self) -> np.ndarray:
        self._tick += 1
        return np.take(self._bank, (self._tick + np.arange(self.num_envs)) % BANK, axis=0)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._steps[:] = 0
        self._prev_done[:] = False
        return self._frames(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions)
        if actions.shape != (self.num_envs,) or not ((actions >= 0) & (actions < 6)).all():
            raise ValueError(f"actions must be {self.num_envs} integers in [0, 6), got {actions!r}")
        resetting = self._prev_done
        self._steps += 1
        self._steps[resetting] = 0
        terminated = self._steps >= self.length
        reward = np.where(resetting, 0.0, 1.0).astype(np.float32)
        self._prev_done = terminated.copy()
        return self._frames(), reward, terminated, np.zeros(self.num_envs, np.bool_), {}


gym.register("RolloutFleetFrames-v0", vector_entry_point=FramesVectorEnv)

"""A custom policy module and an image env, loaded through entry points by test_sampler."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn


class AlwaysRight(nn.Module):
    """Logits that always prefer action 1; a constant value estimate of 7."""

    def __init__(self, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.tensor([-20.0, 20.0]))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bias.expand(len(obs), 2), torch.full((len(obs),), 7.0)


class ImageEnv(gym.Env[np.ndarray, np.int64]):
    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, (40, 40, 3), np.uint8)
        self.action_space = spaces.Discrete(4)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self.np_random.integers(0, 255, (40, 40, 3), dtype=np.uint8), {}

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.np_random.integers(0, 255, (40, 40, 3), dtype=np.uint8), 0.0, False, False, {}


def make_image_env(ctx: dict[str, Any]) -> ImageEnv:
    return ImageEnv()

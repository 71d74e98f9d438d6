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


class StepCounter(nn.Module):
    """A stateful model whose state counts the steps taken since the episode began (and sums
    the observations' first component): the runner's ``state_in`` must equal ``t``."""

    def __init__(self, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(int(action_space.n)))  # type: ignore[attr-defined]

    def initial_state(self) -> list[torch.Tensor]:
        return [torch.zeros(1), torch.zeros(1)]

    def forward(
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        count, total = state
        logits = self.bias.expand(len(obs), -1)
        return logits, count[:, 0], [count + 1, total + obs[:, :1].float()]


class ShapeShifter(StepCounter):
    """A stateful model whose state grows by one element per call: a bad model."""

    def forward(
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        logits, values, (count, total) = super().forward(obs, state)
        return logits, values, [torch.cat([count, count], dim=1), total]

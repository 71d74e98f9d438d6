"""A partially observed CartPole: the velocities are hidden.

CartPole-v1's observation is (cart position, cart velocity, pole angle, pole angular
velocity); this env keeps only the positions, so a policy has to infer the velocities from
what it saw before: a feed-forward policy cannot balance the pole for long, a recurrent one
can (``examples/cartpole_lstm.yaml``, ``make demo-lstm``).

>>> env = make_env({})
>>> env.observation_space.shape
(2,)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

KEPT = (0, 2)
"""Cart position and pole angle."""


class VelocitiesHidden(gym.ObservationWrapper[np.ndarray, Any, np.ndarray]):
    """Keeps the cart position and the pole angle of a CartPole observation."""

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, spaces.Box)
        self.observation_space = spaces.Box(box.low[list(KEPT)], box.high[list(KEPT)], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation[list(KEPT)], np.float32)


def make_env(ctx: Any) -> gym.Env[np.ndarray, Any]:
    """``spec.env.entryPoint: rolloutfleet.examples.masked_cartpole:make_env`` (``config`` is passed to gymnasium)."""
    config = {k: v for k, v in dict(ctx).items()}
    return VelocitiesHidden(gym.make("CartPole-v1", **config))

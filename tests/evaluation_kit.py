"""CartPole policies whose greedy actions are known, and CartPole played by gymnasium itself:
what the evaluation tests compare the evaluation workers' numbers with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

ANGLE = slice(2, 3)
ANGLE_AND_VELOCITY = slice(2, 4)


def lean_weights(like: Mapping[str, np.ndarray], reads: slice = ANGLE_AND_VELOCITY) -> dict[str, np.ndarray]:
    """The default MLP (``like``: its state dict) made into "push the cart the way the pole
    falls": logits (-h, h) with h = tanh(tanh(10 * sum(obs[reads]))), so the greedy action is 1
    exactly when the sum of those observation entries is above 0."""
    weights = {name: np.zeros_like(value) for name, value in like.items()}
    weights["actor_trunk.1.weight"][0, reads] = 10.0
    weights["actor_trunk.3.weight"][0, 0] = 1.0
    weights["pi.weight"][0, 0], weights["pi.weight"][1, 0] = -1.0, 1.0
    return weights


def leaning(reads: slice = ANGLE_AND_VELOCITY) -> Callable[[np.ndarray], int]:
    """The action :func:`lean_weights` makes the model take, computed directly."""
    return lambda obs: int(float(np.sum(obs[reads])) > 0)


def gymnasium_return(seed: int, choose: Callable[[np.ndarray], int], **config: Any) -> tuple[float, int]:
    """(return, length) of one CartPole-v1 episode from ``reset(seed=seed)`` acting by ``choose``."""
    env = gym.make("CartPole-v1", **config)
    obs, _ = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        obs, reward, terminated, truncated, _ = env.step(choose(obs))
        total, steps = total + float(reward), steps + 1
        if terminated or truncated:
            env.close()
            return total, steps

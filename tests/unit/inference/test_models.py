from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.models import DefaultModel


@pytest.mark.parametrize(
    ("obs_space", "act_space", "outputs"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(2), 2),
        (spaces.MultiDiscrete([2, 5]), spaces.Discrete(3), 3),
        (spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6), 6),
        (spaces.Box(0, 1, (10, 10, 1), np.float32), spaces.Box(-1, 1, (3,)), 6),
    ],
)
def test_default_model_shapes(obs_space: spaces.Space, act_space: spaces.Space, outputs: int) -> None:
    model = DefaultModel(obs_space, act_space, distribution_for(act_space))
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(3)]))
    logits, values = model(obs)
    assert logits.shape == (3, outputs)
    assert values.shape == (3,)


def test_unsupported_spaces_say_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"policy\.entryPoint"):
        DefaultModel(spaces.Text(5), spaces.Discrete(2), distribution_for(spaces.Discrete(2)))
    with pytest.raises(ValueError, match="unsupported action space"):
        distribution_for(spaces.MultiBinary(3))

"""The numpy mirror of the default MLP computes what the torch module computes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.models import DefaultModel
from rolloutfleet.inference.numpy_inference import NumpyMLP, supports


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(
    ("obs_space", "act_space", "activation", "hidden"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(2), "tanh", [64, 64]),
        (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,)), "relu", [32]),
        (spaces.Discrete(7), spaces.MultiDiscrete([3, 4]), "tanh", [16, 16, 16]),
        (spaces.Box(0, 255, (5, 2), np.uint8), spaces.Discrete(3), "tanh", [8]),
    ],
)
def test_matches_the_torch_forward(
    obs_space: Any, act_space: Any, activation: str, hidden: list[int], shared: bool
) -> None:
    torch.manual_seed(0)
    model = DefaultModel(
        obs_space, act_space, distribution_for(act_space), hidden=hidden, activation=activation, vf_share_layers=shared
    )
    # Non-trivial biases and log_std, so every parameter matters.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    assert supports(model)
    mirror = NumpyMLP(model)
    obs = np.stack([obs_space.sample() for _ in range(17)])
    with torch.no_grad():
        logits, values = model(torch.from_numpy(obs))
    ours_logits, ours_values = mirror(obs)
    np.testing.assert_allclose(ours_logits, logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_values, values.numpy(), rtol=1e-5, atol=1e-5)
    # After a weight change the mirror follows once refreshed.
    with torch.no_grad():
        model.pi.bias.add_(1.0)
    mirror.refresh()
    with torch.no_grad():
        refreshed = model(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_allclose(mirror(obs)[0], refreshed, rtol=1e-5, atol=1e-5)
    assert not np.allclose(refreshed, logits.numpy())


def test_images_are_not_mirrored() -> None:
    space = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    assert not supports(DefaultModel(space, spaces.Discrete(2), distribution_for(spaces.Discrete(2))))


def test_logits_bound_is_proven_only_for_tanh_heads_with_small_weights() -> None:
    space, actions = spaces.Box(-1, 1, (4,)), spaces.Discrete(2)
    tanh = DefaultModel(space, actions, distribution_for(actions), hidden=[64, 64], activation="tanh")
    relu = DefaultModel(space, actions, distribution_for(actions), hidden=[64, 64], activation="relu")
    assert NumpyMLP(tanh).bounded  # fresh policy heads are initialised small
    assert not NumpyMLP(relu).bounded  # relu features are unbounded
    with torch.no_grad():
        tanh.pi.weight.fill_(1.0)  # |logit| can now reach 64 + |bias|
    mirror = NumpyMLP(tanh)
    assert not mirror.bounded
    worst = mirror(np.full((1, 4), 1.0, np.float32))[0]  # the bound itself still holds
    assert np.abs(worst).max() <= 64 + 1e-3

"""The numpy forward pass of the default MLP computes what the torch module computes, on
the torch module's own weights (names and shapes of its ``state_dict()``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.default_mlp import MLPLayout, acting_part
from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.models import DefaultModel
from rolloutfleet.inference.numpy_inference import NumpyMLP, RowsBank, rows_batchable


def _numpy_state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: value.numpy().copy() for name, value in model.state_dict().items()}


def _pair(obs_space: Any, act_space: Any, **kwargs: Any) -> tuple[DefaultModel, MLPLayout]:
    distribution = distribution_for(act_space)
    model = DefaultModel(obs_space, act_space, distribution, **kwargs)
    layout = MLPLayout.of(obs_space, distribution, kwargs.get("hidden"), kwargs.get("activation", "tanh"),
                          kwargs.get("vf_share_layers", True))  # fmt: skip
    return model, layout


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(
    ("obs_space", "act_space", "activation", "hidden"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(2), "tanh", [64, 64]),
        (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,)), "relu", [32]),
        (spaces.Discrete(7, start=-2), spaces.MultiDiscrete([3, 4]), "tanh", [16, 16, 16]),
        (spaces.MultiDiscrete([3, 5, 2]), spaces.Discrete(2), "relu", [8, 8]),
        (spaces.Box(0, 255, (5, 2), np.uint8), spaces.Discrete(3), "tanh", [8]),
    ],
)
def test_matches_the_torch_forward(
    obs_space: Any, act_space: Any, activation: str, hidden: list[int], shared: bool
) -> None:
    torch.manual_seed(0)
    model, layout = _pair(obs_space, act_space, hidden=hidden, activation=activation, vf_share_layers=shared)
    # Non-trivial biases and log_std, so every parameter matters.
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    assert dict(layout.shapes()) == {name: tuple(v.shape) for name, v in model.state_dict().items()}
    mirror = NumpyMLP(layout, _numpy_state(model))
    obs_space.seed(0)
    obs = np.stack([obs_space.sample() for _ in range(17)])
    with torch.no_grad():
        logits, values = model(torch.from_numpy(obs))
    ours_logits, ours_values = mirror(obs)
    np.testing.assert_allclose(ours_logits, logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours_values, values.numpy(), rtol=1e-5, atol=1e-5)
    # After a weight change the mirror follows once refreshed.
    with torch.no_grad():
        model.pi.bias.add_(1.0)
    mirror.refresh(_numpy_state(model))
    with torch.no_grad():
        refreshed = model(torch.from_numpy(obs))[0].numpy()
    np.testing.assert_allclose(mirror(obs)[0], refreshed, rtol=1e-5, atol=1e-5)
    assert not np.allclose(refreshed, logits.numpy())


def test_images_have_no_mlp_layout() -> None:
    space = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    with pytest.raises(ValueError, match="image space"):
        MLPLayout.of(space, distribution_for(spaces.Discrete(2)))


def test_logits_bound_is_proven_only_for_tanh_heads_with_small_weights() -> None:
    space, actions = spaces.Box(-1, 1, (4,)), spaces.Discrete(2)
    tanh, layout = _pair(space, actions, hidden=[64, 64], activation="tanh")
    relu, relu_layout = _pair(space, actions, hidden=[64, 64], activation="relu")
    assert NumpyMLP(layout, _numpy_state(tanh)).bounded  # fresh policy heads are initialised small
    assert not NumpyMLP(relu_layout, _numpy_state(relu)).bounded  # relu features are unbounded
    with torch.no_grad():
        tanh.pi.weight.fill_(1.0)  # |logit| can now reach 64 + |bias|
    mirror = NumpyMLP(layout, _numpy_state(tanh))
    assert not mirror.bounded
    worst = mirror(np.full((1, 4), 1.0, np.float32))[0]  # the bound itself still holds
    assert np.abs(worst).max() <= 64 + 1e-3


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(
    ("obs_space", "act_space", "activation"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(3), "tanh"),
        (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,)), "relu"),
        (spaces.Box(0, 255, (5, 2), np.uint8), spaces.Discrete(3), "tanh"),
    ],
)
def test_rows_with_their_own_models_act_as_each_model_alone(
    obs_space: Any, act_space: Any, activation: str, shared: bool
) -> None:
    """A league's slots in one forward pass: row r through model r's torch forward."""
    torch.manual_seed(1)
    models, mirrors = [], []
    for _ in range(3):
        model, layout = _pair(obs_space, act_space, hidden=[16, 8], activation=activation, vf_share_layers=shared)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.3)
        models.append(model)
        mirrors.append(NumpyMLP(layout, _numpy_state(model)))
    assert all(rows_batchable(m) for m in mirrors)
    obs_space.seed(1)
    obs = np.stack([obs_space.sample() for _ in range(7)])
    which = [2, 0, 1, 1, 2, 0, 2]
    bank = RowsBank(mirrors)
    logits, values = bank.forward(np.array(which), obs)
    for row, k in enumerate(which):
        with torch.no_grad():
            own_logits, own_values = models[k](torch.from_numpy(obs[row : row + 1]))
        np.testing.assert_allclose(logits[row], own_logits[0].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(values[row], own_values[0].numpy(), rtol=1e-5, atol=1e-5)
    assert not np.allclose(logits[0], logits[5])  # the same observation space, other weights
    # A model refreshed with new weights is copied in again by keep(); untouched ones are not.
    with torch.no_grad():
        models[1].pi.bias.add_(1.0)
    mirrors[1].refresh(_numpy_state(models[1]))
    bank.keep(1, mirrors[1])
    bank.keep(0, mirrors[0])
    with torch.no_grad():
        own_logits, _ = models[1](torch.from_numpy(obs[2:3]))
    np.testing.assert_allclose(bank.forward(np.array([1]), obs[2:3])[0][0], own_logits[0].numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(
    ("obs_space", "act_space", "activation"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(3), "tanh"),
        (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,)), "relu"),  # a Gaussian head: log_std too
    ],
)
def test_a_model_loaded_straight_into_the_bank_acts_as_its_torch_module(
    obs_space: Any, act_space: Any, activation: str, shared: bool
) -> None:
    """A league slot's snapshot loaded from its named weights (no NumpyMLP of its own): its
    rows act as the snapshot's torch module, the logit bound is worked out for it as
    refresh() does, the other models' rows are untouched, and keep() of the slot's old model
    does not write over it."""
    torch.manual_seed(2)
    pairs = [
        _pair(obs_space, act_space, hidden=[16, 8], activation=activation, vf_share_layers=shared) for _ in range(3)
    ]
    mirrors = [NumpyMLP(layout, _numpy_state(model)) for model, layout in pairs]
    bank = RowsBank(mirrors)
    snapshot, _ = _pair(obs_space, act_space, hidden=[16, 8], activation=activation, vf_share_layers=shared)
    with torch.no_grad():
        for param in snapshot.parameters():
            param.add_(torch.randn_like(param) * 0.5)
    before = bank.forward(np.array([0, 2]), np.zeros((2, *obs_space.shape), np.float32))
    bank.load(1, _numpy_state(snapshot))
    bank.keep(1, mirrors[1])  # the slot's own model is unchanged: nothing copied back
    obs_space.seed(3)
    obs = np.stack([obs_space.sample() for _ in range(4)]).astype(np.float32)
    logits, values = bank.forward(np.array([1, 1, 1, 1]), obs)
    with torch.no_grad():
        own_logits, own_values = snapshot(torch.from_numpy(obs))
    np.testing.assert_allclose(logits, own_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, own_values.numpy(), rtol=1e-5, atol=1e-5)
    assert bank.bounded[1] == NumpyMLP(pairs[0][1], _numpy_state(snapshot)).bounded
    after = bank.forward(np.array([0, 2]), np.zeros((2, *obs_space.shape), np.float32))
    np.testing.assert_array_equal(before[0], after[0])


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize(
    ("obs_space", "act_space"),
    [(spaces.Box(-1, 1, (4,)), spaces.Discrete(3)), (spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,)))],
)
def test_a_snapshots_acting_part_acts_as_its_module_with_nan_values_until_a_whole_one_comes(
    obs_space: Any, act_space: Any, shared: bool
) -> None:
    """Loaded without its value function (acting_part: the default MLP's names minus the
    critic trunk and vf head), a slot acts as the snapshot's torch module and predicts NaN,
    not the value function it held before; the other rows keep theirs; a whole snapshot
    brings values back."""
    torch.manual_seed(4)
    pairs = [_pair(obs_space, act_space, hidden=[16, 8], vf_share_layers=shared) for _ in range(2)]
    bank = RowsBank([NumpyMLP(layout, _numpy_state(model)) for model, layout in pairs])
    snapshot, _ = _pair(obs_space, act_space, hidden=[16, 8], vf_share_layers=shared)
    whole = _numpy_state(snapshot)
    part = acting_part(whole)
    assert {"vf.weight", "vf.bias"} <= set(whole) - set(part)
    assert shared or any(name.startswith("critic_trunk.") for name in set(whole) - set(part))
    bank.load(0, part)
    obs_space.seed(5)
    obs = np.stack([obs_space.sample() for _ in range(3)]).astype(np.float32)
    logits, values = bank.forward(np.array([0, 1, 0]), obs)
    with torch.no_grad():
        own_logits, _ = snapshot(torch.from_numpy(obs))
        other_logits, other_values = pairs[1][0](torch.from_numpy(obs[1:2]))
    np.testing.assert_allclose(logits[[0, 2]], own_logits.numpy()[[0, 2]], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logits[1], other_logits[0].numpy(), rtol=1e-5, atol=1e-5)
    assert np.isnan(values[[0, 2]]).all() and values[1] == pytest.approx(float(other_values[0]), abs=1e-5)
    assert np.isnan(bank.forward(np.array([0]), obs[:1])[1]).all()  # every row without one: the critic not run
    bank.load(0, whole)
    with torch.no_grad():
        _, own_values = snapshot(torch.from_numpy(obs))
    np.testing.assert_allclose(bank.forward(np.array([0, 0, 0]), obs)[1], own_values.numpy(), rtol=1e-5, atol=1e-5)


def test_lookup_encodings_do_not_batch_across_models() -> None:
    model, layout = _pair(spaces.Discrete(5), spaces.Discrete(2), hidden=[8])
    assert not rows_batchable(NumpyMLP(layout, _numpy_state(model)))

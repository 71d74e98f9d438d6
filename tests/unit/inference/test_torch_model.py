"""TorchModel's way back to the host: off the CPU a step's outputs (logits, values, a recurrent
model's state) come back in one copy; that path must give exactly what one copy per tensor
gives. It runs here on the CPU with the one-copy path switched on (no GPU in CI)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.policy import Policy
from rolloutfleet.inference.torch_model import TorchModel
from rolloutfleet.spec.job import PolicySpec, RecurrentSpec, SpecError

OBS = spaces.Box(-1, 1, (4,))


def torch_policy(**spec: Any) -> Policy:
    return Policy(
        PolicySpec(device="cpu", inference="torch", hidden=[16], **spec), OBS, spaces.Discrete(3), init_seed=0
    )


def test_a_cpu_model_copies_each_output_and_a_gpu_one_would_copy_once() -> None:
    backend = torch_policy().backend
    assert isinstance(backend, TorchModel)
    assert backend.one_copy_back is False  # set for any device but the CPU


def test_one_copy_back_gives_the_same_outputs() -> None:
    backend = torch_policy().backend
    assert isinstance(backend, TorchModel)
    obs = np.random.default_rng(0).uniform(-1, 1, (9, 4)).astype(np.float32)
    apart = backend.forward(obs)
    backend.one_copy_back = True
    together = backend.forward(obs)
    for a, b in zip(apart, together, strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    assert together[0].shape == (9, 3) and together[1].shape == (9,)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_one_copy_back_gives_the_same_recurrent_state(cell: str) -> None:
    backend = torch_policy(recurrent=RecurrentSpec(cell=cell, size=5)).backend
    assert isinstance(backend, TorchModel)
    obs = np.random.default_rng(1).uniform(-1, 1, (6, 4)).astype(np.float32)
    state = [np.random.default_rng(2).normal(size=(6, *part.shape)).astype(np.float32) for part in backend.initial]
    apart = backend.forward_state(obs, state)
    backend.one_copy_back = True
    together = backend.forward_state(obs, state)
    np.testing.assert_array_equal(apart[0], together[0])
    np.testing.assert_array_equal(apart[1], together[1])
    assert len(together[2]) == (2 if cell == "lstm" else 1)
    for a, b in zip(apart[2], together[2], strict=True):
        assert a.shape == b.shape == (6, 5)
        np.testing.assert_array_equal(a, b)


class WrongValues(torch.nn.Module):
    def __init__(self, *_: Any, **__: Any) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(obs), torch.zeros(len(obs), 2)


def test_values_of_the_wrong_shape_are_one_line_naming_them() -> None:
    backend = TorchModel(WrongValues(), "cpu", None, spaces.Discrete(3), torch_policy().distribution)
    with pytest.raises(SpecError, match=r"vf_preds of shape \(5, 2\), expected \(5,\)"):
        backend.forward(np.zeros((5, 4), np.float32))

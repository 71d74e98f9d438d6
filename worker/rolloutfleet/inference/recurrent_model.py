"""Stateful policy models: the contract, and the default LSTM/GRU wrapper (``policy.recurrent``).

A model is stateful when it declares its initial state (one tensor per part, for one
sub-env) and its ``forward(obs, state)`` returns ``(action_dist_inputs, vf_preds, new_state)``.
The runner keeps one state per sub-env (per agent), starts every episode from
``initial_state()`` and records each row's state as ``state_in_<k>`` columns; replaying an
episode through ``forward`` gives them again (truncated BPTT, R2D2's burn-in). The
contract with an example: docs/guides/recurrent.md.

:class:`RecurrentModel` is the default model with a cell between its trunk and its heads
(RLlib's ``use_lstm``): the default MLP (the Nature CNN for images), an LSTM (state
``[h, c]``) or GRU (state ``[h]``), then the policy and value heads.
:meth:`RecurrentModel.unroll` runs whole sequences at once for a learner.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet.inference.default_mlp import flat_obs_size, is_image_space
from rolloutfleet.inference.distributions import ActionDistribution, DiagGaussian
from rolloutfleet.inference.models import ObsEncoder, _cnn, _init, _mlp, mixed_trunk
from rolloutfleet.inference.obs_spaces import ImageSlices


def is_stateful(module: nn.Module) -> bool:
    """Whether ``module`` declares a recurrent state (an ``initial_state()`` method)."""
    return callable(getattr(module, "initial_state", None))


class RecurrentModel(nn.Module):
    """The default model with an LSTM or GRU cell before its heads.

    >>> from rolloutfleet.inference.distributions import distribution_for
    >>> model = RecurrentModel(spaces.Box(-1, 1, (2,)), spaces.Discrete(2), distribution_for(spaces.Discrete(2)),
    ...                        cell="lstm", size=16, hidden=[32])
    >>> [part.shape for part in model.initial_state()]
    [torch.Size([16]), torch.Size([16])]
    >>> logits, values, state = model(torch.zeros(3, 2), [torch.zeros(3, 16), torch.zeros(3, 16)])
    >>> logits.shape, values.shape, state[0].shape
    (torch.Size([3, 2]), torch.Size([3]), torch.Size([3, 16]))
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        distribution: ActionDistribution,
        cell: str = "lstm",
        size: int = 256,
        hidden: list[int] | None = None,
        activation: str = "tanh",
        images: ImageSlices = (),
    ) -> None:
        super().__init__()
        hidden = hidden or [64, 64]
        act: type[nn.Module] = nn.Tanh if activation == "tanh" else nn.ReLU
        self.encoder = ObsEncoder(observation_space)
        self.trunk: nn.Module
        if images:
            self.trunk = mixed_trunk(flat_obs_size(observation_space), images, hidden, act)
            features = hidden[-1]
        elif is_image_space(observation_space):
            self.trunk, features = _cnn(tuple(observation_space.shape or ()))
        else:
            sizes = [flat_obs_size(observation_space), *hidden]
            layers = _mlp(sizes, act)
            for layer in layers:
                if isinstance(layer, nn.Linear):
                    _init(layer, math.sqrt(2))
            self.trunk = nn.Sequential(nn.Flatten(), *layers)
            features = sizes[-1]
        self.cell = cell
        self.size = size
        rnn_type = nn.LSTM if cell == "lstm" else nn.GRU
        self.rnn = rnn_type(features, size, batch_first=True)
        self.gaussian = isinstance(distribution, DiagGaussian)
        num_outputs = distribution.num_inputs // 2 if self.gaussian else distribution.num_inputs
        self.pi = _init(nn.Linear(size, num_outputs), 0.01)
        self.vf = _init(nn.Linear(size, 1), 1.0)
        self.log_std = nn.Parameter(torch.zeros(num_outputs)) if self.gaussian else None

    def initial_state(self) -> list[torch.Tensor]:
        """Zeros: ``[h, c]`` for an LSTM, ``[h]`` for a GRU, each ``(size,)``."""
        parts = 2 if self.cell == "lstm" else 1
        return [torch.zeros(self.size) for _ in range(parts)]

    def forward(
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """One step for a batch: ``(action_dist_inputs, vf_preds, new_state)``.

        The cell's own step function on the ``nn.LSTM``/``nn.GRU`` weights (about twice as
        fast for a sampler's one-step batches as the sequence module); :meth:`unroll` gives
        the same numbers for sequences."""
        x = self.trunk(self.encoder(obs))
        rnn = self.rnn
        weights: tuple[torch.Tensor, ...] = (rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0)  # type: ignore[assignment]
        if self.cell == "lstm":
            h, c = torch.lstm_cell(x, (state[0], state[1]), *weights)
            new_state = [h, c]
        else:
            h = torch.gru_cell(x, state[0], *weights)
            new_state = [h]
        return *self._heads(h), new_state

    def _heads(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.pi(y)
        values = self.vf(y)[..., 0]
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out, values

    def unroll(
        self, obs: torch.Tensor, state: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Sequences at once: ``obs`` is ``(batch, time, *obs_shape)``, ``state`` the state
        before the first step; returns ``(batch, time, num_inputs)``, ``(batch, time)`` and the
        state after the last step. Steps past a sequence's end (padding) do not change the
        outputs before them."""
        batch, steps = obs.shape[0], obs.shape[1]
        features = self.trunk(self.encoder(obs.reshape(batch * steps, *obs.shape[2:])))
        x = features.reshape(batch, steps, -1)
        if self.cell == "lstm":
            y, (h, c) = self.rnn(x, (state[0][None].contiguous(), state[1][None].contiguous()))
            new_state = [h[0], c[0]]
        else:
            y, h = self.rnn(x, state[0][None].contiguous())
            new_state = [h[0]]
        out, values = self._heads(y)
        return out, values, new_state

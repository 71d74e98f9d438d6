"""The default MLP's forward pass in numpy, for CPU acting.

A rollout worker calls its policy once per vector step on a few dozen observations. For
a 64x64 MLP, torch spends most of such a call in per-op dispatch and ``nn.Module``
plumbing (about 150 us for 64 CartPoles here), while the same arithmetic through numpy's
BLAS takes a fifth of that. So on the CPU the default model acts through this mirror of
its parameters; the torch module stays the source of truth (weights are loaded into it,
``get_weights`` reads it) and the mirror is refreshed after every load. Custom models,
CNNs and CUDA devices always run in torch. ``tests/unit/test_numpy_inference.py`` checks
the mirror against the torch forward pass.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from torch import nn

from rolloutfleet.inference.distributions import LOGIT_BOUND
from rolloutfleet.inference.models import DefaultModel


def supports(model: nn.Module) -> bool:
    """Whether ``model`` is a default MLP over flat Box or Discrete observations."""
    return (
        isinstance(model, DefaultModel)
        and isinstance(model.actor_trunk, nn.Sequential)
        and isinstance(model.actor_trunk[0], nn.Flatten)
        and model.encoder.kind in ("box", "discrete")
    )


def _linears(trunk: nn.Module) -> list[nn.Linear]:
    return [m for m in trunk.modules() if isinstance(m, nn.Linear)]


def _augmented(layer: nn.Linear) -> np.ndarray:
    """``[W | b]`` as float32 (out, in + 1): ``_augmented(l) @ [x; 1] == l(x)`` for column vectors."""
    weight = layer.weight.detach().cpu().numpy()
    bias = layer.bias.detach().cpu().numpy()
    return np.ascontiguousarray(np.concatenate([weight, bias[:, None]], axis=1), np.float32)


class NumpyMLP:
    """Forward pass of a :class:`DefaultModel` MLP: ``(action_dist_inputs, vf_preds)``.

    It runs on transposed activations, one column per observation, each followed by a
    row of ones: a layer is then a single matmul of ``[W | b]`` into a contiguous
    block (no separate bias add), and the activation runs in place on that block.
    Buffers (and views of them) are kept per batch size.
    """

    def __init__(self, model: DefaultModel) -> None:
        self.model = model
        self._plans: dict[int, _Plan] = {}
        self.refresh()

    def refresh(self) -> None:
        """Copy the torch parameters (call after any weight change)."""
        model = self.model
        actor = _linears(model.actor_trunk)
        critic = [] if model.critic_trunk is None else _linears(model.critic_trunk)
        self.shared = not critic
        self.actor = [_augmented(layer) for layer in actor]
        self.critic = [_augmented(layer) for layer in critic]
        self.num_outputs = model.pi.out_features
        if self.shared:
            # Policy and value heads read the same features: one matmul for both.
            self.head = np.concatenate([_augmented(model.pi), _augmented(model.vf)])
        else:
            self.pi, self.vf = _augmented(model.pi), _augmented(model.vf)
        self.relu = any(isinstance(m, nn.ReLU) for m in model.actor_trunk.modules())
        encoder = model.encoder
        self.discrete = encoder.kind == "discrete"
        self.start = getattr(encoder, "start", 0)
        self.scale = getattr(encoder, "scale", None)
        if self.discrete:
            # one_hot(obs) @ W.T + b is a column of (W + b): the first layer is a lookup.
            self.tables = [np.ascontiguousarray(first[:, :-1] + first[:, -1:]) for first in self._firsts()]
        self.log_std = None if model.log_std is None else model.log_std.detach().cpu().numpy().copy()
        # tanh features lie in [-1, 1], so |logit_o| <= sum_j |W_oj| + |b_o|.
        pi = self.head[: self.num_outputs] if self.shared else self.pi
        bound = float(np.abs(pi).sum(axis=1).max(initial=0.0))
        self.bounded = not self.relu and bound <= LOGIT_BOUND
        self._plans.clear()

    def _firsts(self) -> list[np.ndarray]:
        return [self.actor[0]] if self.shared else [self.actor[0], self.critic[0]]

    def _plan_for(self, n: int) -> _Plan:
        plan = self._plans.get(n)
        if plan is None:
            inputs = np.ones((self.actor[0].shape[1], n), np.float32)

            def layers(weights: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
                outs = [np.ones((w.shape[0] + 1, n), np.float32) for w in weights]
                return [(w, out, out[:-1]) for w, out in zip(weights, outs, strict=True)]

            plan = self._plans[n] = _Plan(inputs, inputs[:-1], layers(self.actor), layers(self.critic))
        return plan

    def _trunk(
        self, obs: np.ndarray, x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray, np.ndarray]], which: int
    ) -> np.ndarray:
        tanh = not self.relu
        for depth, (weight, out, block) in enumerate(layers):
            if depth == 0 and self.discrete:
                np.take(self.tables[which], obs.astype(np.intp).reshape(-1) - self.start, axis=1, out=block)
            else:
                np.matmul(weight, x, out=block)
            if tanh:
                np.tanh(block, out=block)
            else:
                np.maximum(block, 0, out=block)
            x = out
        return x

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(obs)
        plan = self._plans.get(n) or self._plan_for(n)
        if not self.discrete:
            flat = obs.reshape(n, -1).T
            if self.scale is not None:
                np.multiply(flat, np.float32(self.scale), out=plan.input_block, casting="unsafe")
            else:
                plan.input_block[...] = flat
        features = self._trunk(obs, plan.inputs, plan.actor, 0)
        k = self.num_outputs
        if self.shared:
            both = self.head @ features  # (outputs + 1, n): fresh, so the views below stay valid
            out, values = both[:k].T, both[k]
        else:
            out = (self.pi @ features).T
            values = (self.vf @ self._trunk(obs, plan.inputs, plan.critic, 1))[0]
        if self.log_std is not None:
            out = np.concatenate([out, np.broadcast_to(self.log_std, out.shape)], axis=1)
        return out, values


class _Plan(NamedTuple):
    """Buffers for one batch size: the input block and, per layer, ``(W|b, output, output block)``."""

    inputs: np.ndarray
    input_block: np.ndarray
    actor: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    critic: list[tuple[np.ndarray, np.ndarray, np.ndarray]]

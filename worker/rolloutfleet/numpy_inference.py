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

import numpy as np
from torch import nn

from rolloutfleet.distributions import LOGIT_BOUND
from rolloutfleet.models import DefaultModel


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


class NumpyMLP:
    """Forward pass of a :class:`DefaultModel` MLP: ``(action_dist_inputs, vf_preds)``."""

    def __init__(self, model: DefaultModel) -> None:
        self.model = model
        self.refresh()

    def refresh(self) -> None:
        """Copy the torch parameters (call after any weight change)."""
        model = self.model

        def arrays(layer: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
            # Stored transposed and contiguous: x @ W is one BLAS call without copies.
            weight = layer.weight.detach().cpu().numpy().T.copy()
            return weight, layer.bias.detach().cpu().numpy().copy()

        actor = _linears(model.actor_trunk)
        critic = [] if model.critic_trunk is None else _linears(model.critic_trunk)
        self.shared = not critic
        if self.shared:
            self.first = arrays(actor[0])
            self.split = self.first[0].shape[1]
        else:
            (wa, ba), (wc, bc) = arrays(actor[0]), arrays(critic[0])
            # Both trunks read the same input: one matmul for both first layers.
            self.first = (np.concatenate([wa, wc], axis=1), np.concatenate([ba, bc]))
            self.split = wa.shape[1]
        self.actor = [arrays(layer) for layer in actor[1:]]
        self.critic = [arrays(layer) for layer in critic[1:]]
        self.pi = arrays(model.pi)
        self.vf = arrays(model.vf)
        self.num_outputs = self.pi[0].shape[1]
        if self.shared:
            # Policy and value heads read the same features: one matmul for both.
            self.head = (np.concatenate([self.pi[0], self.vf[0]], axis=1), np.concatenate([self.pi[1], self.vf[1]]))
        self.relu = any(isinstance(m, nn.ReLU) for m in model.actor_trunk.modules())
        # tanh features lie in [-1, 1], so |logit_o| <= sum_j |W_jo| + |b_o|.
        has_hidden = bool(actor)
        bound = np.abs(self.pi[0]).sum(axis=0) + np.abs(self.pi[1])
        self.bounded = has_hidden and not self.relu and float(bound.max(initial=0.0)) <= LOGIT_BOUND
        encoder = model.encoder
        self.discrete = encoder.kind == "discrete"
        self.start = getattr(encoder, "start", 0)
        self.scale = getattr(encoder, "scale", None)
        self.log_std = None if model.log_std is None else model.log_std.detach().cpu().numpy().copy()

    def _activate(self, x: np.ndarray) -> np.ndarray:
        if self.relu:
            return np.maximum(x, 0, out=x)
        return np.tanh(x, out=x)

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        weight, bias = self.first
        if self.discrete:
            # one_hot(obs) @ W is a row lookup.
            h = weight[obs.astype(np.int64).reshape(-1) - self.start] + bias
        else:
            x = obs.reshape(len(obs), -1)
            if x.dtype != np.float32:
                x = x.astype(np.float32)
            if self.scale is not None:
                x = x * np.float32(self.scale)
            h = x @ weight
            h += bias
        h = self._activate(h)
        a = h if self.shared else h[:, : self.split]
        for w, b in self.actor:
            a = a @ w
            a += b
            a = self._activate(a)
        if self.shared:
            both = a @ self.head[0]
            both += self.head[1]
            out, values = both[:, : self.num_outputs], both[:, self.num_outputs]
        else:
            c = h[:, self.split :]
            for w, b in self.critic:
                c = c @ w
                c += b
                c = self._activate(c)
            out = a @ self.pi[0]
            out += self.pi[1]
            values = (c @ self.vf[0])[:, 0]
            values += self.vf[1]
        if self.log_std is not None:
            out = np.concatenate([out, np.broadcast_to(self.log_std, out.shape)], axis=1)
        return out, values

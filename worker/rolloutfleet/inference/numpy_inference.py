"""The default MLP's forward pass in numpy: how a CPU worker acts without torch.

A rollout worker calls its policy once per vector step on a few dozen observations. For
a 64x64 MLP, torch spends most of such a call in per-op dispatch and ``nn.Module``
plumbing (about 150 us for 64 CartPoles here), while the same arithmetic through numpy's
BLAS takes a fifth of that; and a worker that never imports torch holds about 500 MB less.
So on the CPU the default model (any flat observation space) acts here, on weights that are
plain numpy arrays named as the torch module's ``state_dict()``
(:mod:`rolloutfleet.inference.default_mlp`). Custom models, CNNs, CUDA devices and
``inference: torch`` run in torch (:mod:`rolloutfleet.inference.torch_model`).
``tests/unit/inference/test_numpy_inference.py`` checks this against the torch forward pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from rolloutfleet.inference.default_mlp import MLPLayout
from rolloutfleet.inference.distributions import LOGIT_BOUND

_Layer = tuple[np.ndarray, np.ndarray, np.ndarray]


def _augmented(weights: Mapping[str, np.ndarray], prefix: str) -> np.ndarray:
    """``[W | b]`` as float32 (out, in + 1): ``_augmented(l) @ [x; 1] == l(x)`` for column vectors."""
    weight, bias = weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]
    return np.ascontiguousarray(np.concatenate([weight, bias[:, None]], axis=1), np.float32)


def _logits_bounded(pi: np.ndarray, relu: bool) -> bool:
    """Whether the policy head ``pi`` (``[W | b]``) after a tanh trunk keeps every logit within
    ``LOGIT_BOUND``: tanh features lie in [-1, 1], so ``|logit_o| <= sum_j |W_oj| + |b_o|``."""
    return not relu and float(np.abs(pi).sum(axis=1).max(initial=0.0)) <= LOGIT_BOUND


class NumpyMLP:
    """Forward pass of the default MLP: ``(action_dist_inputs, vf_preds)``.

    It runs on transposed activations, one column per observation, each followed by a
    row of ones: a layer is then a single matmul of ``[W | b]`` into a contiguous
    block (no separate bias add), and the activation runs in place on that block.
    Buffers (and views of them) are kept per batch size.
    """

    def __init__(self, layout: MLPLayout, weights: Mapping[str, np.ndarray]) -> None:
        self.layout = layout
        self._plans: dict[int, _Plan] = {}
        self.refresh(weights)

    def refresh(self, weights: Mapping[str, np.ndarray]) -> None:
        """Take a new set of weights (named and shaped as ``layout.shapes()``)."""
        layout = self.layout
        self.shared = layout.shared
        self.actor = [_augmented(weights, prefix) for prefix, _, _ in layout.trunk("actor_trunk")]
        self.critic = [] if layout.shared else [_augmented(weights, p) for p, _, _ in layout.trunk("critic_trunk")]
        self.num_outputs = layout.num_outputs
        if self.shared:
            # Policy and value heads read the same features: one matmul for both.
            self.head = np.concatenate([_augmented(weights, "pi"), _augmented(weights, "vf")])
        else:
            self.pi, self.vf = _augmented(weights, "pi"), _augmented(weights, "vf")
        self.relu = layout.activation == "relu"
        self.encoding = layout.encoding
        self.box, self.scale = layout.encoding == "box", layout.scale
        if layout.encoding != "box":
            # one_hot(obs) @ W.T + b is a column of W plus b: the first layer is a lookup
            # (the bias folded into the first component's table).
            self.tables = [self._tables(first) for first in self._firsts()]
        self.offsets = np.asarray(layout.offsets, np.intp)
        self.log_std = np.array(weights["log_std"], np.float32) if layout.gaussian else None
        self.bounded = _logits_bounded(self.head[: self.num_outputs] if self.shared else self.pi, self.relu)
        self._plans.clear()

    def _firsts(self) -> list[np.ndarray]:
        return [self.actor[0]] if self.shared else [self.actor[0], self.critic[0]]

    def _tables(self, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(W + b, W): the lookup table of the first one-hot block, and of the others."""
        weight = first[:, :-1]
        return np.ascontiguousarray(weight + first[:, -1:]), np.ascontiguousarray(weight)

    def _plan_for(self, n: int) -> _Plan:
        plan = self._plans.get(n)
        if plan is None:
            inputs = np.ones((self.actor[0].shape[1], n), np.float32)

            def layers(weights: list[np.ndarray]) -> list[_Layer]:
                outs = [np.ones((w.shape[0] + 1, n), np.float32) for w in weights]
                return [(w, out, out[:-1]) for w, out in zip(weights, outs, strict=True)]

            plan = self._plans[n] = _Plan(inputs, inputs[:-1], layers(self.actor), layers(self.critic))
        return plan

    def _lookup(self, obs: np.ndarray, which: int, block: np.ndarray) -> None:
        with_bias, plain = self.tables[which]
        index = obs.astype(np.intp).reshape(len(obs), -1)
        if self.encoding == "discrete":
            np.take(with_bias, index[:, 0] - self.layout.start, axis=1, out=block)
            return
        index = index + self.offsets
        np.take(with_bias, index[:, 0], axis=1, out=block)
        for column in range(1, index.shape[1]):
            block += np.take(plain, index[:, column], axis=1)

    def _trunk(self, obs: np.ndarray, x: np.ndarray, layers: list[_Layer], which: int) -> np.ndarray:
        tanh = not self.relu
        for depth, (weight, out, block) in enumerate(layers):
            if depth == 0 and not self.box:
                self._lookup(obs, which, block)
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
        if self.box:
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


class RowsBank:
    """The ``[W | b]`` matrices of ``size`` models of one layout (a league's slots), stacked
    per layer, for a batch whose rows each act with their own model: one gather and one
    batched matmul a layer (:meth:`forward`), instead of a call a model. A model's matrices
    are copied in by :meth:`keep`, which sees from their identity whether they changed
    since (a :meth:`NumpyMLP.refresh` makes new ones). A model loaded without its value
    function (:meth:`load` of its acting part) predicts NaN values. Box encodings only
    (:func:`rows_batchable`)."""

    def __init__(self, models: Sequence[NumpyMLP]) -> None:
        first = self.first = models[0]

        def stacked(matrices: list[np.ndarray]) -> list[np.ndarray]:
            return [np.zeros((len(models), *m.shape), np.float32) for m in matrices]

        self.actor, self.critic = stacked(first.actor), stacked(first.critic)
        self.head = stacked([first.head] if first.shared else [first.pi, first.vf])
        self.log_std = None if first.log_std is None else np.zeros((len(models), *first.log_std.shape), np.float32)
        # Each Linear's [W | b] rows in the stacks: (its stack, prefix, first row).
        layout = first.layout
        linears = [
            (stack, prefix, 0) for stack, (prefix, _, _) in zip(self.actor, layout.trunk("actor_trunk"), strict=True)
        ]
        if not first.shared:
            linears += [(stack, prefix, 0)
                        for stack, (prefix, _, _) in zip(self.critic, layout.trunk("critic_trunk"), strict=True)]  # fmt: skip
        linears += [(self.head[0], "pi", 0), (self.head[0], "vf", first.num_outputs)] if first.shared else [
            (self.head[0], "pi", 0), (self.head[1], "vf", 0)]  # fmt: skip
        # As load() reads them: (its stack, first row, the names of its weight and bias).
        self._linears = [(stack, row, f"{prefix}.weight", f"{prefix}.bias") for stack, prefix, row in linears]
        self.bounded = np.zeros(len(models), bool)
        self.valued = np.ones(len(models), bool)
        """Whether each model holds its value function (see :meth:`load`)."""
        self._plans: dict[int, tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]] = {}
        self._kept: list[Any] = [None] * len(models)
        for k, model in enumerate(models):
            self.keep(k, model)

    def keep(self, k: int, model: NumpyMLP, valued: bool = True) -> None:
        """Model ``k`` is ``model``: copied in unless its matrices are the ones already held
        (the ones copied last, whatever :meth:`load` wrote since). ``valued``: whether its
        value function is real (not a stand-in for one never loaded)."""
        if self._kept[k] is model.actor[0]:
            return
        self.valued[k] = valued
        for bank, matrix in zip(self.actor, model.actor, strict=True):
            bank[k] = matrix
        for bank, matrix in zip(self.critic, model.critic, strict=True):
            bank[k] = matrix
        for bank, matrix in zip(self.head, [model.head] if model.shared else [model.pi, model.vf], strict=True):
            bank[k] = matrix
        if self.log_std is not None:
            self.log_std[k] = model.log_std
        self.bounded[k] = model.bounded
        self._kept[k] = model.actor[0]

    def load(self, k: int, weights: Mapping[str, np.ndarray]) -> None:
        """Model ``k``'s matrices straight from its named weights (``layout.shapes()``, checked
        by the caller) as :meth:`NumpyMLP.refresh` builds them, without a model of its own:
        a league slot's next snapshot is one copy into the stacks. Weights without the value
        function (:func:`~rolloutfleet.inference.default_mlp.acting_part`) leave it out: the
        model's values are NaN until weights with one come."""
        valued = True
        for stack, row, weight, bias_name in self._linears:
            bias = weights.get(bias_name)
            if bias is None:  # the value function's, left out
                valued = False
                continue
            stack[k, row : row + len(bias), :-1] = weights[weight]
            stack[k, row : row + len(bias), -1] = bias
        self.valued[k] = valued
        if self.log_std is not None:
            self.log_std[k] = weights["log_std"]
        self.bounded[k] = _logits_bounded(self.head[0][k, : self.first.num_outputs], self.first.relu)

    def forward(self, which: np.ndarray, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`NumpyMLP.__call__` with row ``r`` through model ``which[r]``. A layer is a
        gather of the rows' matrices and one batched product, its activation written into the
        next layer's input (kept per batch size, its column of ones set once)."""
        n, first = len(obs), self.first
        inputs, actor, critic = self._plans.get(n) or self._plan_for(n)
        flat = obs.reshape(n, -1)
        if first.scale is None:
            inputs[:, :-1] = flat
        else:
            np.multiply(flat, np.float32(first.scale), out=inputs[:, :-1], casting="unsafe")

        def trunk(stacks: list[np.ndarray], outs: list[np.ndarray]) -> np.ndarray:
            x = inputs
            for stack, out in zip(stacks, outs, strict=True):
                block = np.matmul(stack[which], x[:, :, None])[:, :, 0]
                if first.relu:
                    np.maximum(block, 0, out=out[:, :-1])
                else:
                    np.tanh(block, out=out[:, :-1])
                x = out
            return x

        def head(stack: np.ndarray, features: np.ndarray) -> np.ndarray:
            return np.matmul(stack[which], features[:, :, None])[:, :, 0]  # type: ignore[no-any-return]

        features = trunk(self.actor, actor)
        k = first.num_outputs
        valued = self.valued[which]
        if first.shared:
            both = head(self.head[0], features)
            out, values = both[:, :k], both[:, k]
        elif valued.any():
            out, values = head(self.head[0], features), head(self.head[1], trunk(self.critic, critic))[:, 0]
        else:  # no row's model has its value function: its trunk not run
            out, values = head(self.head[0], features), np.full(n, np.nan, np.float32)
        if not valued.all():
            values = np.where(valued, values, np.float32(np.nan))
        if self.log_std is not None:
            out = np.concatenate([out, self.log_std[which]], axis=1)
        return out, values

    def _plan_for(self, n: int) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        """The inputs of each layer for a batch of ``n`` rows, each with its column of ones."""

        def outputs(stacks: list[np.ndarray]) -> list[np.ndarray]:
            return [np.ones((n, stack.shape[1] + 1), np.float32) for stack in stacks]

        plan = self._plans[n] = (np.ones((n, self.first.actor[0].shape[1]), np.float32), outputs(self.actor),
                                 outputs(self.critic))  # fmt: skip
        return plan


def rows_batchable(mlp: NumpyMLP) -> bool:
    """Whether a :class:`RowsBank` runs ``mlp``'s layout (a Box observation: no lookup tables)."""
    return bool(mlp.box)


class _Plan(NamedTuple):
    """Buffers for one batch size: the input block and, per layer, ``(W|b, output, output block)``."""

    inputs: np.ndarray
    input_block: np.ndarray
    actor: list[_Layer]
    critic: list[_Layer]


class NumpyModel:
    """A policy model held as numpy arrays and run by :class:`NumpyMLP` (the CPU, no torch)."""

    device = "cpu"
    inference = "numpy"
    stateful = False
    initial: list[np.ndarray] = []  # the default MLP has no state (never mutated)

    def __init__(self, layout: MLPLayout, weights: Mapping[str, np.ndarray]) -> None:
        self.layout = layout
        self.weights = {name: np.array(value) for name, value in weights.items()}
        self.mlp = NumpyMLP(layout, self.weights)

    @property
    def bounded(self) -> bool:
        """Whether the logits are proven small enough to skip the softmax's max-shift."""
        return self.mlp.bounded

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.mlp(obs)

    def forward_state(
        self, obs: np.ndarray, state: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        raise TypeError("the default MLP has no state")

    def state(self) -> dict[str, np.ndarray]:
        return {name: value.copy() for name, value in self.weights.items()}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: value.shape for name, value in self.weights.items()}

    def dtypes(self) -> dict[str, np.dtype[Any]]:
        return {name: value.dtype for name, value in self.weights.items()}

    def load(self, weights: Mapping[str, np.ndarray]) -> None:
        self.weights = {name: np.array(weights[name], dtype=value.dtype) for name, value in self.weights.items()}
        self.mlp.refresh(self.weights)

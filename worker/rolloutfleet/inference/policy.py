"""The acting policy: a torch model, its action distribution, and weight bookkeeping.

One batched forward pass per vector step, on the chosen device; actions are sampled in
numpy from the model's outputs (see :mod:`rolloutfleet.inference.distributions`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet.inference.distributions import ActionDistribution, distribution_for
from rolloutfleet.inference.models import DefaultModel
from rolloutfleet.inference.numpy_inference import NumpyMLP, supports
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import PolicySpec, SpecError

INIT_SEED_PATH = 0xFFFFFFFE
"""Seed path of the initial weights: derived from the job's seed only, equal on every worker."""
POLICY_SEED_PATH = 0xFFFFFFFF
"""Seed path of a worker's action sampling: (seed, worker index, POLICY_SEED_PATH)."""


def resolve_device(name: str) -> torch.device:
    """``auto`` → the first CUDA device when one is usable, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SpecError(f"spec.policy.device: {name!r} asked for, but no CUDA device is available")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SpecError(
                f"spec.policy.device: {name!r} asked for, but only {torch.cuda.device_count()} CUDA device(s) exist"
            )
    return device


class Policy:
    """Acts for a batch of observations and holds the versioned weights.

    >>> policy = Policy(PolicySpec(), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), seed=0)
    >>> out = policy.compute_actions(np.zeros((8, 4), np.float32), explore=True)
    >>> out.actions.shape
    (8,)
    """

    def __init__(
        self,
        spec: PolicySpec,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        seed: int | None = None,
        init_seed: int | None = None,
    ) -> None:
        self.spec = spec
        self.observation_space = observation_space
        self.action_space = action_space
        try:
            self.distribution = distribution_for(action_space)
        except ValueError as exc:
            raise SpecError(f"spec.policy: {exc}") from None
        self.device = resolve_device(spec.device)
        if spec.num_threads is not None and self.device.type == "cpu":
            # Process-wide; tiny per-step batches run fastest on one thread.
            torch.set_num_threads(spec.num_threads)
        # Every worker starts from the same weights (seeded by the job, not the worker).
        with torch.random.fork_rng(devices=[]):
            if init_seed is not None:
                torch.manual_seed(init_seed)
            self.model = self._build_model().to(self.device).eval()
        self.rng = np.random.default_rng(seed)
        self.weights_seq_no = 0
        self._pinned: torch.Tensor | None = None
        self._numpy: NumpyMLP | None = None
        if spec.inference == "auto" and self.device.type == "cpu" and supports(self.model):
            self._numpy = NumpyMLP(self.model)  # type: ignore[arg-type]

    def _build_model(self) -> nn.Module:
        return build_policy_model(self.spec, self.observation_space, self.action_space, self.distribution)

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's ``(action_dist_inputs, vf_preds)`` for a numpy batch, as numpy."""
        if self._numpy is not None:
            return self._numpy(obs)
        with torch.inference_mode():
            tensor = torch.from_numpy(obs)
            if self.device.type != "cpu":
                tensor = self._to_device(tensor)
            dist_inputs, values = self.model(tensor)
            if values is None:
                values = torch.full((len(obs),), float("nan"))
            if self.device.type != "cpu":
                dist_inputs, values = dist_inputs.cpu(), values.cpu()
        expected = self.distribution.num_inputs
        if dist_inputs.ndim != 2 or dist_inputs.shape[1] != expected:
            raise SpecError(
                f"spec.policy: the model returned action_dist_inputs of shape {tuple(dist_inputs.shape)}, "
                f"expected ({len(obs)}, {expected}) for {self.action_space}"
            )
        return dist_inputs.detach().numpy(), values.detach().reshape(-1).numpy()

    @property
    def logits_bounded(self) -> bool:
        """Whether the numpy forward pass proves its logits small enough to skip the max-shift."""
        return self._numpy is not None and self._numpy.bounded

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # A reused pinned staging buffer lets the copy to the GPU run asynchronously.
        if self._pinned is None or self._pinned.shape != tensor.shape or self._pinned.dtype != tensor.dtype:
            self._pinned = torch.empty(tensor.shape, dtype=tensor.dtype).pin_memory()
        self._pinned.copy_(tensor)
        return self._pinned.to(self.device, non_blocking=True)

    def act(self, explore: bool) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """A function ``obs -> (actions, logp, dist_inputs, values)`` bound for the sampling loop."""
        forward, sample, rng = self.forward, self.distribution.sample, self.rng
        bounded = self.logits_bounded

        def act(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            dist_inputs, values = forward(obs)
            actions, logp = sample(dist_inputs, rng, explore, bounded)
            return actions, logp, dist_inputs, values

        return act

    def compute_actions(self, obs: np.ndarray, explore: bool) -> ActionOutput:
        dist_inputs, values = self.forward(obs)
        actions, logp = self.distribution.sample(dist_inputs, self.rng, explore, self.logits_bounded)
        return ActionOutput(actions, logp, dist_inputs, values)

    def random_actions(self, num: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Uniform actions (no forward pass); logp is the uniform density, model outputs NaN."""
        space = self.action_space
        if isinstance(space, spaces.Box):
            low = np.where(np.isfinite(space.low), space.low, -1.0)
            high = np.where(np.isfinite(space.high), space.high, 1.0)
            actions = self.rng.uniform(low, high, (num, *space.shape)).astype(space.dtype)
        elif isinstance(space, spaces.Discrete):
            actions = self.rng.integers(0, int(space.n), num) + int(space.start)
        else:
            actions = self.rng.integers(0, space.nvec, (num, *space.nvec.shape))  # type: ignore[attr-defined]
        logp = np.full(num, self.distribution.uniform_logp(), np.float32)
        dist_inputs = np.full((num, self.distribution.num_inputs), np.nan, np.float32)
        return actions, logp, dist_inputs, np.full(num, np.nan, np.float32)

    # -- weights ---------------------------------------------------------------------

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's state dict as numpy arrays on the host (copies)."""
        return {name: t.detach().cpu().numpy().copy() for name, t in self.model.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any], seq_no: int | None = None) -> bool:
        """Load weights; with ``seq_no``, only when newer than the loaded version.

        Returns whether the weights were loaded. A weights dict that does not fit the
        model (missing or unexpected names, wrong shapes) raises ``ValueError`` and leaves
        the current weights in place.
        """
        if seq_no is not None and seq_no <= self.weights_seq_no:
            return False
        current = self.model.state_dict()
        missing = sorted(set(current) - set(weights))
        unexpected = sorted(set(weights) - set(current))
        if missing or unexpected:
            raise ValueError(f"weights do not fit the model: missing {missing}, unexpected {unexpected}")
        tensors = {}
        for name, value in weights.items():
            tensor = torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)
            if tuple(tensor.shape) != tuple(current[name].shape):
                raise ValueError(
                    f"weights do not fit the model: {name!r} has shape {tuple(tensor.shape)}, "
                    f"expected {tuple(current[name].shape)}"
                )
            tensors[name] = tensor
        self.model.load_state_dict(tensors)
        if self._numpy is not None:
            self._numpy.refresh()
        if seq_no is not None:
            self.weights_seq_no = seq_no
        return True


class ActionOutput:
    __slots__ = ("actions", "dist_inputs", "logp", "values")

    def __init__(self, actions: np.ndarray, logp: np.ndarray, dist_inputs: np.ndarray, values: np.ndarray) -> None:
        self.actions = actions
        self.logp = logp
        self.dist_inputs = dist_inputs
        self.values = values


def build_policy_model(
    spec: PolicySpec,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    distribution: ActionDistribution,
) -> nn.Module:
    """The policy's torch module (the default MLP/CNN, or ``spec.entryPoint``'s class), on the current device."""
    if spec.entry_point is None:
        try:
            return DefaultModel(
                observation_space,
                action_space,
                distribution,
                hidden=list(spec.hidden),
                activation=spec.activation,
                vf_share_layers=spec.vf_share_layers,
            )
        except ValueError as exc:
            raise SpecError(f"spec.policy: {exc}") from None
    cls = load_entry_point(spec.entry_point, "spec.policy.entryPoint")
    try:
        model = cls(observation_space, action_space, **spec.config)
    except Exception as exc:  # noqa: BLE001 - report the user's constructor error in one line
        raise SpecError(
            f"spec.policy.entryPoint: {spec.entry_point}(...) failed: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"spec.policy.entryPoint: {spec.entry_point} built a {type(model).__name__}, not a torch.nn.Module"
        )
    return model

"""A policy model that runs in torch: custom modules, the default CNN, any model on a GPU,
and the default MLP with ``inference: torch``. Importing this module imports torch; a
:class:`~rolloutfleet.inference.policy.Policy` does so only when it needs one of these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet.inference.distributions import ActionDistribution
from rolloutfleet.inference.models import DefaultModel
from rolloutfleet.inference.obs_spaces import ImageSlices
from rolloutfleet.inference.recurrent_model import RecurrentModel, is_stateful
from rolloutfleet.spec.entry_points import load_entry_point
from rolloutfleet.spec.job import PolicySpec, SpecError


def build_module(
    spec: PolicySpec,
    observation_space: spaces.Space[Any],
    action_space: spaces.Space[Any],
    distribution: ActionDistribution,
    init_seed: int | None,
    images: ImageSlices = (),
) -> nn.Module:
    """The policy's torch module with its initial weights (the same for the same ``init_seed``);
    ``images``: the image leaves in a Dict/Tuple's encoded input, for the default models."""
    # Every worker starts from the same weights (seeded by the job, not the worker).
    with torch.random.fork_rng(devices=[]):
        if init_seed is not None:
            torch.manual_seed(init_seed)
        if spec.recurrent is not None and spec.entry_point is not None:
            raise SpecError(
                "spec.policy.recurrent: wraps the default model; a custom entryPoint model is stateful by "
                "declaring initial_state() and forward(obs, state) itself"
            )
        if spec.recurrent is not None:
            try:
                return RecurrentModel(
                    observation_space,
                    action_space,
                    distribution,
                    cell=spec.recurrent.cell,
                    size=spec.recurrent.size,
                    hidden=list(spec.hidden),
                    activation=spec.activation,
                    images=images,
                )
            except ValueError as exc:
                raise SpecError(f"spec.policy: {exc}") from None
        if spec.entry_point is None:
            try:
                return DefaultModel(
                    observation_space,
                    action_space,
                    distribution,
                    hidden=list(spec.hidden),
                    activation=spec.activation,
                    vf_share_layers=spec.vf_share_layers,
                    init_seed=init_seed,
                    images=images,
                )
            except ValueError as exc:
                raise SpecError(f"spec.policy: {exc}") from None
        return _custom(spec, observation_space, action_space)


def _custom(spec: PolicySpec, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> nn.Module:
    assert spec.entry_point is not None
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


class TorchModel:
    """Runs a torch module on ``device``: one batched forward pass per vector step,
    observations copied to the device once (through a pinned buffer) and outputs back once.

    A stateful module (:mod:`rolloutfleet.inference.recurrent_model`) acts through
    :meth:`forward_state`; its state travels as numpy arrays, one row per sub-env."""

    inference = "torch"

    def __init__(
        self,
        module: nn.Module,
        device: str,
        num_threads: int | None,
        action_space: spaces.Space[Any],
        distribution: ActionDistribution,
    ) -> None:
        self.device = device
        self.action_space = action_space
        self.torch_device = torch.device(device)
        if num_threads is not None and self.torch_device.type == "cpu":
            # Process-wide; tiny per-step batches run fastest on one thread.
            torch.set_num_threads(num_threads)
        self.module = module.to(self.torch_device).eval()
        self.distribution = distribution
        self._pinned: torch.Tensor | None = None
        # Off the CPU every .cpu() waits for the device: a step's outputs come back in one copy.
        self.one_copy_back = self.torch_device.type != "cpu"
        self.stateful = is_stateful(module)
        self.initial: list[np.ndarray] = self._initial_state() if self.stateful else []

    bounded = False
    """Logits of a torch module are not proven bounded: the softmax keeps its max-shift."""

    def _initial_state(self) -> list[np.ndarray]:
        try:
            parts = [torch.as_tensor(part).detach().cpu().float().numpy() for part in self.module.initial_state()]  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - the user's model: one line naming it
            raise SpecError(f"spec.policy: the model's initial_state() failed: {type(exc).__name__}: {exc}") from None
        if not parts:
            raise SpecError("spec.policy: the model's initial_state() returned no tensors")
        return parts

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.stateful:
            raise TypeError("a stateful model acts through forward_state(obs, state)")
        with torch.inference_mode():
            dist_inputs, values = self.module(self._input(obs))
            dist, vf = self._outputs(obs, dist_inputs, values)
        return dist, vf

    def forward_state(
        self, obs: np.ndarray, state: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """A stateful model's step: ``(action_dist_inputs, vf_preds, new_state)`` for a batch
        and the state of each of its rows (``(batch, *part_shape)`` per part)."""
        with torch.inference_mode():
            # The state goes over synchronously: the pinned staging buffer is the observations'.
            device_state = [torch.from_numpy(part).to(self.torch_device) for part in state]
            result = self.module(self._input(obs), device_state)
            if not isinstance(result, tuple | list) or len(result) != 3:
                raise SpecError(
                    "spec.policy: a model with initial_state() must return (action_dist_inputs, vf_preds, new_state)"
                )
            dist_inputs, values, new_state = result
            self._check_state(state, list(new_state))  # shapes only: no wait for the device
            dist, vf, *parts = self._outputs(obs, dist_inputs, values, [part.float() for part in new_state])
        return dist, vf, parts

    def _check_state(self, state: list[np.ndarray], new_state: list[torch.Tensor]) -> None:
        before = [tuple(part.shape) for part in state]
        after = [tuple(part.shape) for part in new_state]
        if before != after:
            raise SpecError(
                f"spec.policy: the model's state changed shape between calls: it took {before} and returned "
                f"{after} (new_state must have the shapes of initial_state(), with the batch dimension)"
            )

    def _input(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        return tensor if self.torch_device.type == "cpu" else self._to_device(tensor)

    def _outputs(
        self,
        obs: np.ndarray,
        dist_inputs: torch.Tensor,
        values: torch.Tensor | None,
        state: list[torch.Tensor] | None = None,
    ) -> list[np.ndarray]:
        """``[action_dist_inputs, vf_preds, *state]`` on the host, shapes checked first (a tensor's
        shape is known without waiting for the device)."""
        rows, expected = len(obs), self.distribution.num_inputs
        if dist_inputs.ndim != 2 or tuple(dist_inputs.shape) != (rows, expected):
            raise SpecError(
                f"spec.policy: the model returned action_dist_inputs of shape {tuple(dist_inputs.shape)}, "
                f"expected ({rows}, {expected}) for {self.action_space}"
            )
        if values is None:
            values = torch.full((rows,), float("nan"), device=dist_inputs.device)
        if values.numel() != rows:
            raise SpecError(
                f"spec.policy: the model returned vf_preds of shape {tuple(values.shape)}, expected ({rows},)"
            )
        parts = [dist_inputs.detach(), values.detach().reshape(rows), *(part.detach() for part in state or [])]
        if not self.one_copy_back or any(part.device != dist_inputs.device for part in parts):
            # a custom model may return a tensor it built on the host (a constant value): copy each
            return [part.cpu().numpy() for part in parts]
        flat = [part.reshape(rows, -1).float() for part in parts]
        host = torch.cat(flat, dim=1).cpu().numpy()
        out, start = [], 0
        for part, columns in zip(parts, flat, strict=True):
            width = columns.shape[1]
            out.append(host[:, start : start + width].reshape(tuple(part.shape)))
            start += width
        return out

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # A reused pinned staging buffer lets the copy to the GPU run asynchronously.
        if self._pinned is None or self._pinned.shape != tensor.shape or self._pinned.dtype != tensor.dtype:
            self._pinned = torch.empty(tensor.shape, dtype=tensor.dtype).pin_memory()
        self._pinned.copy_(tensor)
        return self._pinned.to(self.torch_device, non_blocking=True)

    def state(self) -> dict[str, np.ndarray]:
        return {name: t.detach().cpu().numpy().copy() for name, t in self.module.state_dict().items()}

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(t.shape) for name, t in self.module.state_dict().items()}

    def dtypes(self) -> dict[str, np.dtype[Any]]:
        # numpy has no bfloat16: such a tensor takes float32 (cast again by load_state_dict).
        return {
            name: np.dtype("float32") if t.dtype == torch.bfloat16 else torch.empty(0, dtype=t.dtype).numpy().dtype
            for name, t in self.module.state_dict().items()
        }

    def load(self, weights: Mapping[str, np.ndarray]) -> None:
        self.module.load_state_dict({name: torch.as_tensor(value) for name, value in weights.items()})

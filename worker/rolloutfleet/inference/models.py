"""Default torch models for gymnasium spaces, and the contract for custom ones.

A policy model is any ``nn.Module`` whose ``forward(obs)`` returns
``(action_dist_inputs, vf_preds)``: a ``(batch, num_inputs)`` tensor laid out as
:mod:`rolloutfleet.inference.distributions` documents, and a ``(batch,)`` value estimate (or
``None``). Custom models are built as ``Model(observation_space, action_space, **config)``.
The default: an MLP for flat observations, a Nature CNN for images (and for each image leaf
of a Dict/Tuple observation, beside its other leaves), with policy and value
heads on shared hidden layers (RLlib's default) or, optionally, a separate value MLP. The
MLP's initial weights come from :func:`rolloutfleet.inference.default_mlp.initial_weights`,
the numpy initializer that torch-free workers use too.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet.inference.default_mlp import MLPLayout, flat_obs_size, image_layout, initial_weights, is_image_space
from rolloutfleet.inference.distributions import ActionDistribution, DiagGaussian
from rolloutfleet.inference.obs_spaces import ImageSlices

__all__ = ["DefaultModel", "ObsEncoder", "flat_obs_size", "is_image_space"]

_Layer = TypeVar("_Layer", nn.Linear, nn.Conv2d)


class ObsEncoder(nn.Module):
    """Turns a batch of raw observations into float features."""

    def __init__(self, space: spaces.Space[Any]) -> None:
        super().__init__()
        self.kind = "box"
        if isinstance(space, spaces.Discrete):
            self.kind, self.n, self.start = "discrete", int(space.n), int(space.start)
        elif isinstance(space, spaces.MultiDiscrete):
            self.kind = "multi_discrete"
            nvec = space.nvec.reshape(-1).astype(np.int64)
            self.register_buffer("offsets_buf", torch.as_tensor(np.r_[0, np.cumsum(nvec)[:-1]]))
            self.n = int(nvec.sum())
        elif isinstance(space, spaces.Box):
            self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else None
        flat_obs_size(space)  # validates the space

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "discrete":
            return nn.functional.one_hot(obs.long() - self.start, self.n).float()
        if self.kind == "multi_discrete":
            index = obs.long().reshape(len(obs), -1) + self.get_buffer("offsets_buf")
            out = torch.zeros(len(obs), self.n, device=obs.device)
            return out.scatter_(1, index, 1.0)
        x = obs.float()
        return x * self.scale if self.scale is not None else x


def _mlp(sizes: list[int], activation: type[nn.Module]) -> list[nn.Module]:
    """Linear layers and activations; their weights are set by :meth:`DefaultModel._copy_in`."""
    layers: list[nn.Module] = []
    for fan_in, fan_out in itertools.pairwise(sizes):
        layers += [nn.Linear(fan_in, fan_out), activation()]
    return layers


def _init(layer: _Layer, gain: float) -> _Layer:
    nn.init.orthogonal_(layer.weight, gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class DefaultModel(nn.Module):
    """An MLP (a CNN for images) with a policy head and a value head; the value head reads the
    shared hidden layers or, with ``vf_share_layers=False``, an MLP of its own.

    >>> model = DefaultModel(spaces.Box(-1, 1, (4,)), spaces.Discrete(2), hidden=[64, 64])
    >>> logits, values = model(torch.zeros(3, 4))
    >>> logits.shape, values.shape
    (torch.Size([3, 2]), torch.Size([3]))
    """

    def __init__(
        self,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        distribution: ActionDistribution,
        hidden: list[int] | None = None,
        activation: str = "tanh",
        vf_share_layers: bool = True,
        init_seed: int | None = None,
        images: ImageSlices = (),
    ) -> None:
        """``init_seed`` seeds the MLP's numpy initializer (None: a seed drawn from torch's
        generator, so ``torch.manual_seed`` still decides); the CNN draws from torch's generator.
        ``images``: where a flat observation (a Dict/Tuple's encoded leaves) holds images
        (:attr:`~rolloutfleet.inference.obs_spaces.ObsParts.images`): each goes through a CNN,
        the rest joins their features before the MLP (all drawn from torch's generator)."""
        super().__init__()
        hidden = hidden or [64, 64]
        act: type[nn.Module] = nn.Tanh if activation == "tanh" else nn.ReLU
        self.encoder = ObsEncoder(observation_space)
        self.gaussian = isinstance(distribution, DiagGaussian)
        num_outputs = distribution.num_inputs // 2 if self.gaussian else distribution.num_inputs
        self.actor_trunk: nn.Module
        self.critic_trunk: nn.Module | None
        if images:
            size = flat_obs_size(observation_space)
            self.actor_trunk = mixed_trunk(size, images, hidden, act)
            self.critic_trunk = None if vf_share_layers else mixed_trunk(size, images, hidden, act)
            self.pi = _init(nn.Linear(hidden[-1], num_outputs), 0.01)
            self.vf = _init(nn.Linear(hidden[-1], 1), 1.0)
        elif is_image_space(observation_space):
            trunk, features = _cnn(tuple(observation_space.shape or ()))
            self.actor_trunk = trunk
            self.critic_trunk = None
            self.pi = _init(nn.Linear(features, num_outputs), 0.01)
            self.vf = _init(nn.Linear(features, 1), 1.0)
        else:
            sizes = [flat_obs_size(observation_space), *hidden]
            self.actor_trunk = nn.Sequential(nn.Flatten(), *_mlp(sizes, act))
            self.critic_trunk = None if vf_share_layers else nn.Sequential(nn.Flatten(), *_mlp(sizes, act))
            self.pi = nn.Linear(sizes[-1], num_outputs)
            self.vf = nn.Linear(sizes[-1], 1)
        self.log_std = nn.Parameter(torch.zeros(num_outputs)) if self.gaussian else None
        if not (images or is_image_space(observation_space)):
            if init_seed is None:
                init_seed = int(torch.randint(0, 2**62, ()).item())
            layout = MLPLayout.of(observation_space, distribution, hidden, activation, vf_share_layers)
            self._copy_in(initial_weights(layout, init_seed))

    def _copy_in(self, weights: dict[str, np.ndarray]) -> None:
        parameters = dict(self.named_parameters())
        if set(parameters) - set(weights):  # the numpy layout and this module disagree: a bug
            raise RuntimeError(f"no initial weights for {sorted(set(parameters) - set(weights))}")
        with torch.no_grad():
            for name, parameter in parameters.items():
                parameter.copy_(torch.from_numpy(weights[name]))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder(obs)
        features = self.actor_trunk(x)
        out = self.pi(features)
        critic = features if self.critic_trunk is None else self.critic_trunk(x)
        values = self.vf(critic)[:, 0]
        if self.log_std is not None:
            out = torch.cat([out, self.log_std.expand_as(out)], dim=-1)
        return out, values


def _cnn(shape: tuple[int, ...]) -> tuple[nn.Module, int]:
    """Nature-CNN for images of at least 36x36 (HWC, or CHW frame stacks: see
    :func:`~rolloutfleet.inference.default_mlp.image_layout`); smaller images get 3x3 convolutions."""
    layout, height, width, channels = image_layout(shape)
    convs = [(32, 8, 4), (64, 4, 2), (64, 3, 1)] if min(height, width) >= 36 else [(16, 3, 1), (32, 3, 1)]
    layers: list[nn.Module] = [_ToCHW(layout)]
    in_channels = channels
    for out_channels, kernel, stride in convs:
        layers += [_init(nn.Conv2d(in_channels, out_channels, kernel, stride), math.sqrt(2)), nn.ReLU()]
        in_channels = out_channels
    layers.append(nn.Flatten())
    trunk = nn.Sequential(*layers)
    with torch.no_grad():
        features = trunk(torch.zeros(1, *shape)).shape[1]
    head = nn.Sequential(trunk, _init(nn.Linear(features, 512), math.sqrt(2)), nn.ReLU())
    return head, 512


class ImageLeaves(nn.Module):
    """A flat input holding images (a Dict/Tuple's encoded leaves): each image's entries,
    reshaped to its shape, through a CNN of its own; the other entries as they are; all
    concatenated (``features`` of them per row)."""

    def __init__(self, size: int, images: ImageSlices) -> None:
        super().__init__()
        self.slices = [(offset, offset + math.prod(shape), shape) for offset, shape in images]
        self.cnns = nn.ModuleList(_cnn(shape)[0] for _, shape in images)
        rest = np.ones(size, bool)
        for start, stop, _ in self.slices:
            rest[start:stop] = False
        # Not a weight: left out of state_dict, so the published weights are the layers' only.
        self.register_buffer("rest_buf", torch.as_tensor(np.flatnonzero(rest)), persistent=False)
        self.features = 512 * len(images) + int(rest.sum())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = len(x)
        parts = [
            cnn(x[:, start:stop].reshape(n, *shape))
            for (start, stop, shape), cnn in zip(self.slices, self.cnns, strict=True)
        ]
        parts.append(x.index_select(1, self.get_buffer("rest_buf")))
        return torch.cat(parts, dim=1)


def mixed_trunk(size: int, images: ImageSlices, hidden: list[int], act: type[nn.Module]) -> nn.Sequential:
    """:class:`ImageLeaves`, then the MLP on its features (orthogonal init, gain sqrt(2))."""
    leaves = ImageLeaves(size, images)
    layers = _mlp([leaves.features, *hidden], act)
    for layer in layers:
        if isinstance(layer, nn.Linear):
            _init(layer, math.sqrt(2))
    return nn.Sequential(leaves, *layers)


class _ToCHW(nn.Module):
    """A batch of images in ``layout`` as ``(batch, channels, height, width)``."""

    def __init__(self, layout: str) -> None:
        super().__init__()
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2) if self.layout == "HWC" else x

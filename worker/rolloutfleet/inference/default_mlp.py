"""The default MLP without torch: its layout, its parameter names and its initial weights.

A worker whose policy is the default MLP on the CPU acts in numpy
(:mod:`rolloutfleet.inference.numpy_inference`) and never imports torch; a learner trains the
torch :class:`~rolloutfleet.inference.models.DefaultModel`. Both take the MLP's initial
weights from :func:`initial_weights` (numpy, seeded by the job), so every worker and the
learner start from identical parameters. Names and shapes are those of the torch module's
``state_dict()``, in its order, so weights travel between the two unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import numpy as np
from gymnasium import spaces

from rolloutfleet.inference.distributions import ActionDistribution, DiagGaussian

Encoding = Literal["box", "discrete", "multi_discrete"]
TRUNK_GAIN = math.sqrt(2)
PI_GAIN = 0.01
VF_GAIN = 1.0
VALUE_FUNCTION = ("critic_trunk.", "vf.")
"""Name prefixes of the default MLP's value function (its own trunk, if any, and its head):
what a policy does not need to act, only to predict ``vf_preds``."""


_V = TypeVar("_V")


def acting_part(named: Mapping[str, _V]) -> dict[str, _V]:
    """The entries of ``named`` (weights, or a signature) a default MLP needs to act: all but
    its value function's, in order.

    >>> list(acting_part(dict.fromkeys(["actor_trunk.1.weight", "critic_trunk.1.weight", "pi.bias", "vf.bias"])))
    ['actor_trunk.1.weight', 'pi.bias']
    """
    return {name: value for name, value in named.items() if not name.startswith(VALUE_FUNCTION)}


def is_image_space(space: spaces.Space[Any]) -> bool:
    """A 3-D Box: the default model is a CNN (a single 2-D frame is not one: AtariPreprocessing's
    ``grayscale_newaxis: true`` makes it ``(84, 84, 1)``)."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3


ImageLayout = Literal["HWC", "CHW"]


def image_layout(shape: tuple[int, ...]) -> tuple[ImageLayout, int, int, int]:
    """``(layout, height, width, channels)`` of an image observation's 3-D shape.

    Channels come first when the first axis is shorter than both others (a stack of frames:
    gymnasium's ``FrameStackObservation`` over grayscale frames, EnvPool's and ALE's Atari
    vector envs give ``(4, 84, 84)``), else last (``(210, 160, 3)`` RGB, ``(84, 84, 1)``).

    >>> image_layout((4, 84, 84)), image_layout((210, 160, 3))
    (('CHW', 84, 84, 4), ('HWC', 210, 160, 3))
    """
    first, second, third = shape
    if first < second and first < third:
        return "CHW", second, third, first
    return "HWC", first, second, third


def flat_obs_size(space: spaces.Space[Any]) -> int:
    """Inputs to an MLP for one observation of ``space`` (Discrete ones become one-hot)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(space.nvec.sum())
    if isinstance(space, spaces.Box):
        return int(math.prod(space.shape))
    raise ValueError(
        f"unsupported observation space {space}: the default models take Box, Discrete or "
        "MultiDiscrete (use policy.entryPoint for others, or flatten the env's observations)"
    )


@dataclass(frozen=True)
class MLPLayout:
    """What the default MLP for a pair of spaces looks like.

    >>> from rolloutfleet.inference.distributions import distribution_for
    >>> layout = MLPLayout.of(spaces.Box(-1, 1, (4,)), distribution_for(spaces.Discrete(2)), [64, 64])
    >>> list(layout.shapes())[:2], layout.shapes()["pi.weight"]
    (['actor_trunk.1.weight', 'actor_trunk.1.bias'], (2, 64))
    """

    encoding: Encoding
    inputs: int
    hidden: tuple[int, ...]
    num_outputs: int
    """Policy head outputs: the logits, or a Gaussian's means (its ``log_std`` is a parameter)."""
    gaussian: bool
    shared: bool
    """The value head reads the policy's hidden layers (``vf_share_layers``)."""
    activation: str
    start: int = 0
    """A Discrete observation space's ``start``."""
    scale: float | None = None
    """1/255 for uint8 Box observations."""
    offsets: tuple[int, ...] = ()
    """Where each MultiDiscrete component's one-hot block begins."""

    @classmethod
    def of(
        cls,
        observation_space: spaces.Space[Any],
        distribution: ActionDistribution,
        hidden: list[int] | None = None,
        activation: str = "tanh",
        vf_share_layers: bool = True,
    ) -> MLPLayout:
        """The layout for flat observations; ``ValueError`` for image or unsupported spaces."""
        if is_image_space(observation_space):
            raise ValueError(f"{observation_space} is an image space: the default model is a CNN")
        inputs = flat_obs_size(observation_space)
        gaussian = isinstance(distribution, DiagGaussian)
        num_outputs = distribution.num_inputs // 2 if gaussian else distribution.num_inputs
        base = cls("box", inputs, tuple(hidden or [64, 64]), num_outputs, gaussian, vf_share_layers, activation)
        if isinstance(observation_space, spaces.Discrete):
            return replace(base, encoding="discrete", start=int(observation_space.start))
        if isinstance(observation_space, spaces.MultiDiscrete):
            nvec = observation_space.nvec.reshape(-1).astype(np.int64)
            return replace(
                base, encoding="multi_discrete", offsets=tuple(int(o) for o in np.r_[0, np.cumsum(nvec)[:-1]])
            )
        return replace(base, scale=1.0 / 255.0 if observation_space.dtype == np.uint8 else None)

    def trunk(self, name: str) -> list[tuple[str, int, int]]:
        """``(prefix, fan_in, fan_out)`` of each Linear of a trunk (``nn.Sequential(Flatten, Linear, act, ...)``)."""
        sizes = [self.inputs, *self.hidden]
        return [(f"{name}.{2 * i + 1}", sizes[i], sizes[i + 1]) for i in range(len(self.hidden))]

    def linears(self) -> list[tuple[str, int, int, float]]:
        """Every Linear as ``(prefix, fan_in, fan_out, gain)``, in the order they are initialised."""
        trunks = self.trunk("actor_trunk") + ([] if self.shared else self.trunk("critic_trunk"))
        features = self.hidden[-1] if self.hidden else self.inputs
        heads = [("pi", features, self.num_outputs, PI_GAIN), ("vf", features, 1, VF_GAIN)]
        return [(prefix, fan_in, fan_out, TRUNK_GAIN) for prefix, fan_in, fan_out in trunks] + heads

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """The torch module's ``state_dict()`` names and shapes, in its order."""
        shapes: dict[str, tuple[int, ...]] = {}
        if self.gaussian:
            shapes["log_std"] = (self.num_outputs,)
        if self.encoding == "multi_discrete":
            shapes["encoder.offsets_buf"] = (len(self.offsets),)
        for prefix, fan_in, fan_out, _ in self.linears():
            shapes[f"{prefix}.weight"] = (fan_out, fan_in)
            shapes[f"{prefix}.bias"] = (fan_out,)
        return shapes


def orthogonal(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """A ``(rows, cols)`` matrix with orthonormal rows or columns, times ``gain``: the
    construction of ``torch.nn.init.orthogonal_`` (QR of a Gaussian matrix, signs fixed by
    ``R``'s diagonal so the result is uniformly distributed), drawn from ``rng``."""
    gaussian = rng.standard_normal((rows, cols) if rows >= cols else (cols, rows))
    q, r = np.linalg.qr(gaussian)
    q *= np.where(np.diag(r) < 0, -1.0, 1.0)
    return np.ascontiguousarray((q if rows >= cols else q.T) * gain, np.float32)


def initial_weights(layout: MLPLayout, seed: int | None) -> dict[str, np.ndarray]:
    """The MLP's initial state: orthogonal weights (gain sqrt(2) in the trunks, 0.01 for the
    policy head, 1 for the value head), zero biases, zero ``log_std``; the same for the same
    ``seed`` on any machine, with or without torch."""
    rng = np.random.default_rng(seed)
    drawn: dict[str, np.ndarray] = {}
    for prefix, fan_in, fan_out, gain in layout.linears():
        drawn[f"{prefix}.weight"] = orthogonal(rng, fan_out, fan_in, gain)
        drawn[f"{prefix}.bias"] = np.zeros(fan_out, np.float32)
    drawn["log_std"] = np.zeros(layout.num_outputs, np.float32)
    drawn["encoder.offsets_buf"] = np.asarray(layout.offsets, np.int64)
    return {name: drawn[name] for name in layout.shapes()}

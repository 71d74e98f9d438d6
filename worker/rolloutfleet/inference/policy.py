"""The acting policy: a model, its action distribution, and weight bookkeeping.

One batched forward pass per vector step; actions are sampled in numpy from the model's
outputs (see :mod:`rolloutfleet.inference.distributions`). The model is a
:class:`~rolloutfleet.inference.numpy_inference.NumpyModel` (the default MLP on the CPU:
torch is never imported) or a :class:`~rolloutfleet.inference.torch_model.TorchModel` (a
custom module, the default CNN, a GPU, or ``inference: torch``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from gymnasium import spaces

from rolloutfleet.data.weights_check import CheckedWeights, check_weights
from rolloutfleet.inference.default_mlp import MLPLayout, initial_weights, is_image_space
from rolloutfleet.inference.device import resolve_device
from rolloutfleet.inference.distributions import Categorical, distribution_for
from rolloutfleet.inference.exploration import Exploration, OrnsteinUhlenbeckNoise, make_exploration
from rolloutfleet.inference.numpy_inference import NumpyModel
from rolloutfleet.inference.obs_spaces import obs_parts
from rolloutfleet.spec.job import PolicySpec, SpecError

if TYPE_CHECKING:
    from torch import nn

INIT_SEED_PATH = 0xFFFFFFFE
"""Seed path of the initial weights: derived from the job's seed only, equal on every worker."""
POLICY_SEED_PATH = 0xFFFFFFFF
"""Seed path of a worker's action sampling: (seed, worker index, POLICY_SEED_PATH)."""


class ActFn(Protocol):
    """:meth:`Policy.act`'s result: ``(obs, mask=None) -> (actions, logp, dist_inputs, values)``."""

    def __call__(
        self, obs: np.ndarray, mask: np.ndarray | None = None, /
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]: ...


class RecurrentActFn(Protocol):
    """:meth:`Policy.act_recurrent`'s result: ``(obs, state, mask=None) -> (actions, logp,
    dist_inputs, values, new_state)``; ``state`` and ``new_state`` hold one row per observation."""

    def __call__(
        self, obs: np.ndarray, state: list[np.ndarray], mask: np.ndarray | None = None, /
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]: ...


class PolicyModel(Protocol):
    """What a :class:`Policy` acts with: numpy in, numpy out, weights as numpy arrays."""

    device: str
    inference: str
    stateful: bool
    initial: list[np.ndarray]
    """A stateful model's initial state for one sub-env, one array per part (empty otherwise)."""

    @property
    def bounded(self) -> bool: ...

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def forward_state(
        self, obs: np.ndarray, state: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]: ...

    def state(self) -> dict[str, np.ndarray]: ...

    def shapes(self) -> dict[str, tuple[int, ...]]: ...

    def dtypes(self) -> dict[str, np.dtype[Any]]: ...

    def load(self, weights: Mapping[str, np.ndarray]) -> None: ...


def runs_in_numpy(spec: PolicySpec, observation_space: spaces.Space[Any], device: str) -> bool:
    """Whether the policy is the default MLP acting on the CPU with ``inference: auto``."""
    return (
        spec.entry_point is None
        and spec.recurrent is None
        and spec.inference == "auto"
        and device == "cpu"
        and not is_image_space(observation_space)
        and isinstance(observation_space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete)
    )


class Policy:
    """Acts for a batch of observations and holds the versioned weights.

    >>> policy = Policy(PolicySpec(), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), seed=0)
    >>> out = policy.compute_actions(np.zeros((8, 4), np.float32), explore=True)
    >>> out.actions.shape, policy.inference
    ((8,), 'numpy')
    """

    def __init__(
        self,
        spec: PolicySpec,
        observation_space: spaces.Space[Any],
        action_space: spaces.Space[Any],
        seed: int | None = None,
        init_seed: int | None = None,
        worker: tuple[int, int] = (0, 1),
    ) -> None:
        """``worker``: (index, count) of the worker sampling with it (Ape-X's per-worker ε)."""
        self.spec = spec
        self.observation_space = observation_space
        self.action_space = action_space
        try:
            self.distribution = distribution_for(action_space)
            self.obs_parts = obs_parts(observation_space, action_space)
        except ValueError as exc:
            raise SpecError(f"spec.policy: {exc}") from None
        try:
            self.exploration: Exploration | None = make_exploration(spec.exploration, action_space, *worker)
        except ValueError as exc:
            raise SpecError(f"spec.policy.{exc}") from None
        self.model_space = self.obs_parts.model_space  # what the model reads (a Dict's 'observation')
        device = resolve_device(spec.device)
        self._init_seed = init_seed
        in_numpy = runs_in_numpy(spec, self.model_space, device) and not self.obs_parts.images
        self.backend: PolicyModel = self._numpy(init_seed) if in_numpy else self._torch(device, init_seed)
        self.rng = np.random.default_rng(seed)
        self.weights_seq_no = 0

    def _numpy(self, init_seed: int | None) -> NumpyModel:
        spec = self.spec
        try:
            layout = MLPLayout.of(self.model_space, self.distribution, list(spec.hidden), spec.activation,
                                  spec.vf_share_layers)  # fmt: skip
        except ValueError as exc:
            raise SpecError(f"spec.policy: {exc}") from None
        return NumpyModel(layout, initial_weights(layout, init_seed))

    def _torch(self, device: str, init_seed: int | None) -> PolicyModel:
        from rolloutfleet.inference.torch_model import TorchModel, build_module

        module = build_module(
            self.spec, self.model_space, self.action_space, self.distribution, init_seed, self.obs_parts.images
        )
        return TorchModel(module, device, self.spec.num_threads, self.action_space, self.distribution)

    @property
    def device(self) -> str:
        """Where the model runs: ``cpu`` or ``cuda[:N]``."""
        return self.backend.device

    @property
    def inference(self) -> str:
        """``numpy`` (the default MLP on the CPU: no torch in the process) or ``torch``."""
        return self.backend.inference

    def torch_model(self) -> nn.Module:
        """The policy as a torch module with its current weights (imports torch).

        A torch policy returns the module it acts with; a numpy one a new CPU
        :class:`~rolloutfleet.inference.models.DefaultModel` holding a copy of its weights.
        """
        import torch

        from rolloutfleet.inference.torch_model import TorchModel, build_module

        if isinstance(self.backend, TorchModel):
            return self.backend.module
        module = build_module(
            self.spec, self.model_space, self.action_space, self.distribution, self._init_seed, self.obs_parts.images
        )
        module.load_state_dict({name: torch.from_numpy(value) for name, value in self.backend.state().items()})
        return module.eval()

    def forward(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The model's ``(action_dist_inputs, vf_preds)`` for a numpy batch, as numpy."""
        return self.backend.forward(obs)

    # -- recurrent state -------------------------------------------------------------

    @property
    def recurrent(self) -> bool:
        """Whether the model is stateful (``policy.recurrent``, or a model with ``initial_state()``)."""
        return self.backend.stateful

    def initial_state(self, rows: int) -> list[np.ndarray]:
        """The model's initial state for ``rows`` sub-envs: per part a ``(rows, *part_shape)`` array."""
        return [np.repeat(part[None], rows, axis=0) for part in self.backend.initial]

    def forward_state(
        self, obs: np.ndarray, state: list[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """A stateful model's ``(action_dist_inputs, vf_preds, new_state)`` for a numpy batch."""
        return self.backend.forward_state(obs, state)

    @property
    def logits_bounded(self) -> bool:
        """Whether the numpy forward pass proves its logits small enough to skip the max-shift."""
        return self.backend.bounded

    def chooser(
        self, explore: bool, bounded: bool | None = None
    ) -> Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray]]:
        """``(dist_inputs, mask) -> (actions, logp)``: how actions are drawn from the model's
        outputs; ``bounded``: whether those logits are proven small (default: this model's)."""
        sample, rng, distribution = self.distribution.sample, self.rng, self.distribution
        bounded = self.logits_bounded if bounded is None else bounded
        if explore and self.exploration is not None:
            explorer = self.exploration.sample

            def choose_exploring(dist_inputs: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
                # A masked action's logit is -inf: the explorer never picks it (ε's uniform draw included).
                logits = dist_inputs if mask is None else np.where(mask, dist_inputs, -np.inf).astype(np.float32)
                return explorer(logits, rng)

            return choose_exploring

        def choose(dist_inputs: np.ndarray, mask: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
            if mask is None:
                return sample(dist_inputs, rng, explore, bounded)
            assert isinstance(distribution, Categorical)  # obs_parts allows masks for Discrete only
            return distribution.sample_masked(dist_inputs, mask, rng, explore)

        return choose

    def act(self, explore: bool) -> ActFn:
        """A function ``(obs, mask=None) -> (actions, logp, dist_inputs, values)`` bound for the
        sampling loop; with a ``mask`` (``action_mask`` rows, Discrete actions) only allowed
        actions are drawn (``dist_inputs`` stay the model's unmasked logits)."""
        forward, choose = self.forward, self.chooser(explore)

        def act(
            obs: np.ndarray, mask: np.ndarray | None = None
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            dist_inputs, values = forward(obs)
            actions, logp = choose(dist_inputs, mask)
            return actions, logp, dist_inputs, values

        return act

    def act_recurrent(self, explore: bool, random_actions: bool = False) -> RecurrentActFn:
        """:meth:`act` for a stateful model: ``(obs, state, mask=None) -> (actions, logp,
        dist_inputs, values, new_state)``. With ``random_actions`` the actions are uniform
        (:meth:`random_actions`) but the model still steps the state, so a row's recorded state
        is what replaying its episode's observations gives whatever acted."""
        forward, choose = self.backend.forward_state, self.chooser(explore)

        def act(
            obs: np.ndarray, state: list[np.ndarray], mask: np.ndarray | None = None
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
            dist_inputs, values, new_state = forward(obs, state)
            if random_actions:
                return (*self.random_actions(len(obs), mask), new_state)
            actions, logp = choose(dist_inputs, mask)
            return actions, logp, dist_inputs, values, new_state

        return act

    def compute_actions(self, obs: np.ndarray, explore: bool, mask: np.ndarray | None = None) -> ActionOutput:
        """Actions for a batch of observations (the model's input: a Dict's ``observation``
        leaf); with a ``mask`` (``action_mask`` rows) only allowed actions are taken, as in
        :meth:`act`, which this is the one-call form of."""
        if self.recurrent:
            raise TypeError("a stateful policy acts through act_recurrent(explore)(obs, state, mask)")
        actions, logp, dist_inputs, values = self.act(explore)(obs, mask)
        return ActionOutput(actions, logp, dist_inputs, values)

    # -- exploration -----------------------------------------------------------------

    def exploration_scale(self, explore: bool) -> float | None:
        """The ε or σ actions are taken with now (0 when not exploring); None for ``stochastic``."""
        if self.exploration is None:
            return None
        return self.exploration.scale if explore else 0.0

    def set_global_step(self, step: int) -> None:
        """The learner's global step: schedules of ε or σ follow it."""
        if self.exploration is not None:
            self.exploration.set_global_step(step)

    def noise_state(self, explore: bool) -> OrnsteinUhlenbeckNoise | None:
        """The Ornstein-Uhlenbeck noise whose per-episode state the runner restarts, when it acts with one."""
        noise = self.exploration
        return noise if explore and isinstance(noise, OrnsteinUhlenbeckNoise) else None

    def random_actions(
        self, num: int, mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Uniform actions (no forward pass; with a ``mask``, uniform over the allowed ones);
        logp is the uniform density, model outputs NaN."""
        space = self.action_space
        dist_inputs = np.full((num, self.distribution.num_inputs), np.nan, np.float32)
        if mask is not None:
            allowed = mask.astype(np.bool_, copy=False)
            scores = np.where(allowed, self.rng.random(allowed.shape), -1.0)
            actions = scores.argmax(axis=1) + int(space.start)  # type: ignore[attr-defined]
            logp = -np.log(allowed.sum(axis=1)).astype(np.float32)
            return actions, logp, dist_inputs, np.full(num, np.nan, np.float32)
        if isinstance(space, spaces.Box):
            low = np.where(np.isfinite(space.low), space.low, -1.0)
            high = np.where(np.isfinite(space.high), space.high, 1.0)
            actions = self.rng.uniform(low, high, (num, *space.shape)).astype(space.dtype)
        elif isinstance(space, spaces.Discrete):
            actions = self.rng.integers(0, int(space.n), num) + int(space.start)
        else:
            actions = self.rng.integers(0, space.nvec, (num, *space.nvec.shape))  # type: ignore[attr-defined]
        logp = np.full(num, self.distribution.uniform_logp(), np.float32)
        return actions, logp, dist_inputs, np.full(num, np.nan, np.float32)

    # -- weights ---------------------------------------------------------------------

    def get_weights(self) -> dict[str, np.ndarray]:
        """The model's state dict as numpy arrays on the host (copies)."""
        return self.backend.state()

    def weights_signature(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        """Name -> (shape, dtype) of the model's state dict: what a weights version must fit."""
        dtypes = self.backend.dtypes()
        return {name: (tuple(shape), dtypes[name]) for name, shape in self.backend.shapes().items()}

    def set_weights(self, weights: Mapping[str, Any], seq_no: int | None = None) -> bool:
        """Load weights (numpy arrays or torch tensors); with ``seq_no``, only when newer than
        the loaded version.

        Returns whether the weights were loaded. A weights dict that does not fit the
        model (missing or unexpected names, wrong shapes, dtypes that are not the model's
        kind of number) or that holds NaN/inf raises
        :class:`~rolloutfleet.data.weights_check.WeightsRefused` (a ``ValueError``) and
        leaves the current weights in place. :class:`~rolloutfleet.data.weights_check.CheckedWeights`
        checked against this model's signature are loaded without a second check.
        """
        if seq_no is not None and seq_no <= self.weights_seq_no:
            return False
        signature = self.weights_signature()
        if isinstance(weights, CheckedWeights) and weights.fits(signature):
            arrays: Mapping[str, np.ndarray] = weights  # checked ahead against this model's signature
        else:
            arrays = check_weights({name: _host_array(value) for name, value in weights.items()}, signature)
        self.backend.load(arrays)
        if seq_no is not None:
            self.weights_seq_no = seq_no
        return True


def _host_array(value: Any) -> np.ndarray:
    """A numpy array of ``value`` (a torch tensor is read without importing torch here)."""
    if hasattr(value, "detach"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            tensor = tensor.float()
        return np.asarray(tensor.numpy())
    return np.asarray(value)


class ActionOutput:
    __slots__ = ("actions", "dist_inputs", "logp", "values")

    def __init__(self, actions: np.ndarray, logp: np.ndarray, dist_inputs: np.ndarray, values: np.ndarray) -> None:
        self.actions = actions
        self.logp = logp
        self.dist_inputs = dist_inputs
        self.values = values

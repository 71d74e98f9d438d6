"""Exploration beyond sampling the action distribution (``policy.exploration``).

An :class:`Exploration` turns a batch of the model's ``action_dist_inputs`` into actions
and their log-probabilities under the behaviour it implements, at its current
:attr:`~Exploration.scale` (ε or σ). The scale is fixed at construction (a constant, or
Ape-X's per-worker ε) or follows the learner's global step (:meth:`set_global_step`,
applied by the runner between fragments), so the per-step work is the draw itself.

* :class:`EpsilonGreedy`: Discrete actions; with probability ε a uniform action (among
  the actions whose logit is not -inf), else the argmax. ``logp`` is the behaviour's:
  log(ε/k + (1−ε)·[a is the argmax]) with k allowed actions.
* :class:`GaussianNoise`: float Box actions; ``mean + σ·h·N(0, 1)`` clipped to the space,
  with ``h`` the half-width of each bounded dimension (1 where unbounded). ``logp`` is
  the density of the unclipped draw (0 when σ is 0: the action is the mean).
* :class:`OrnsteinUhlenbeckNoise`: as Gaussian, with the noise ``x ← (1−θ)·x + σ·N(0, 1)``
  kept per slot (a sub-env, or a multi-agent runner's (sub-env, agent)); a slot's state
  restarts at 0 when its episode starts. ``logp`` is this step's draw given the state.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet.spec.sections.exploration_spec import (
    DEFAULT_THETA,
    NOISE_TYPES,
    ExplorationSpec,
    per_worker_epsilon,
    schedule_value,
)

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Exploration:
    """The scale and its schedule; subclasses draw the actions."""

    def __init__(self, spec: ExplorationSpec, worker_index: int = 0, num_workers: int = 1) -> None:
        self.spec = spec
        self.global_step = 0
        if spec.per_worker is not None:
            self.scale = per_worker_epsilon(spec.per_worker, worker_index, num_workers)
        else:
            constant = spec.constant_scale
            self.scale = constant if constant is not None else self._scheduled(0)

    def _scheduled(self, step: int) -> float:
        assert self.spec.schedule is not None
        return schedule_value(self.spec.schedule, step)

    def set_global_step(self, step: int) -> None:
        """Follow the learner's global step (a no-op unless the scale has a schedule)."""
        self.global_step = step
        if self.spec.schedule is not None:
            self.scale = self._scheduled(step)

    def sample(self, inputs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


class EpsilonGreedy(Exploration):
    def __init__(self, spec: ExplorationSpec, space: spaces.Discrete, worker_index: int, num_workers: int) -> None:
        super().__init__(spec, worker_index, num_workers)
        self.n = int(space.n)
        self.start = int(space.start)

    def sample(self, inputs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        eps, rows = self.scale, len(inputs)
        greedy = inputs.argmax(axis=1)
        allowed = inputs > -np.inf
        if allowed.all():
            uniform = rng.integers(0, self.n, rows)
            choices = np.full(rows, self.n)
        else:  # masked actions (-inf logits) are never drawn
            uniform = (rng.random(inputs.shape) * allowed).argmax(axis=1)
            choices = allowed.sum(axis=1)
        explore = rng.random(rows) < eps
        actions = np.where(explore, uniform, greedy)
        prob = eps / choices + (1.0 - eps) * (actions == greedy)
        logp = np.log(prob).astype(np.float32)
        if self.start:
            actions += self.start
        return actions, logp


class GaussianNoise(Exploration):
    def __init__(self, spec: ExplorationSpec, space: spaces.Box, worker_index: int, num_workers: int) -> None:
        super().__init__(spec, worker_index, num_workers)
        self.shape = tuple(space.shape)
        self.size = int(np.prod(self.shape))
        low, high = space.low.reshape(-1).astype(np.float64), space.high.reshape(-1).astype(np.float64)
        bounded = np.isfinite(low) & np.isfinite(high)
        self.half_width = np.where(bounded, (high - low) / 2, 1.0).astype(np.float32)
        self.low, self.high = low.astype(np.float32), high.astype(np.float32)
        self._log_half_width = float(np.log(self.half_width).sum())

    def _noise(self, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(noise in units of the half-width, this step's standard normal draws)``."""
        draws = rng.standard_normal((rows, self.size), dtype=np.float32)
        return draws * np.float32(self.scale), draws

    def sample(self, inputs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        mean = inputs[:, : self.size]
        noise, draws = self._noise(len(inputs), rng)
        actions = np.clip(mean + noise * self.half_width, self.low, self.high)
        if self.scale > 0:
            log_sigma = self.size * math.log(self.scale) + self._log_half_width
            logp = (-0.5 * draws * draws).sum(axis=1) - log_sigma - self.size * _HALF_LOG_2PI
        else:
            logp = np.zeros(len(inputs))
        return actions.reshape((-1, *self.shape)).astype(np.float32), logp.astype(np.float32)


class OrnsteinUhlenbeckNoise(GaussianNoise):
    def __init__(self, spec: ExplorationSpec, space: spaces.Box, worker_index: int, num_workers: int) -> None:
        super().__init__(spec, space, worker_index, num_workers)
        self.theta = DEFAULT_THETA if spec.theta is None else spec.theta
        self.state = np.zeros((0, self.size), np.float32)
        self._slots: dict[Hashable, int] = {}
        self._bound: np.ndarray | None = None

    def _capacity(self, slots: int) -> None:
        if slots > len(self.state):
            grown = np.zeros((max(slots, 2 * len(self.state)), self.size), np.float32)
            grown[: len(self.state)] = self.state
            self.state = grown

    def reset(self, slots: np.ndarray) -> None:
        """Restart the noise of these slots (index or boolean mask over sub-envs) at 0."""
        index = np.flatnonzero(slots) if slots.dtype == np.bool_ else np.asarray(slots)
        self.state[index[index < len(self.state)]] = 0.0

    def bind(self, keys: Iterable[Hashable], starts: Iterable[bool]) -> None:
        """The next batch's rows are these keys' slots (a multi-agent runner's (sub-env, agent));
        a key whose episode ``starts`` gets fresh noise."""
        table = self._slots
        slots = np.fromiter((table.setdefault(key, len(table)) for key in keys), np.int64)
        self._capacity(len(table))
        fresh = slots[np.fromiter(starts, np.bool_, len(slots))]
        self.state[fresh] = 0.0
        self._bound = slots

    def _noise(self, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        draws = rng.standard_normal((rows, self.size), dtype=np.float32)
        slots, self._bound = self._bound, None
        if slots is None:  # rows are slots 0..rows-1 (the single-agent runner's sub-envs)
            self._capacity(rows)
            state = self.state[:rows]
            state *= np.float32(1.0 - self.theta)
            state += draws * np.float32(self.scale)
            return state.copy(), draws
        x = self.state[slots] * np.float32(1.0 - self.theta) + draws * np.float32(self.scale)
        self.state[slots] = x
        return x, draws


def make_exploration(
    spec: ExplorationSpec, action_space: spaces.Space[Any], worker_index: int = 0, num_workers: int = 1
) -> Exploration | None:
    """The exploration ``spec`` asks for (None: ``stochastic``, sample the distribution);
    ``ValueError`` naming ``type`` when it does not fit the action space."""
    kind = spec.type
    if kind == "stochastic":
        return None
    if kind == "epsilonGreedy":
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"exploration.type: epsilonGreedy needs a Discrete action space, got {action_space}")
        return EpsilonGreedy(spec, action_space, worker_index, num_workers)
    assert kind in NOISE_TYPES
    if not (isinstance(action_space, spaces.Box) and np.issubdtype(action_space.dtype, np.floating)):
        raise ValueError(f"exploration.type: {kind} noise needs a float Box action space, got {action_space}")
    cls = GaussianNoise if kind == "gaussian" else OrnsteinUhlenbeckNoise
    return cls(spec, action_space, worker_index, num_workers)

"""Action distributions over a policy's outputs, sampled in numpy.

The policy's forward pass runs in numpy or torch; turning its outputs into actions runs
here because, for the small batches a rollout worker sees, a handful of numpy calls cost a
fraction of the equivalent torch ops (each torch op pays microseconds of dispatch).
The layout of ``action_dist_inputs`` matches RLlib's:

* ``Discrete(n)``: ``n`` logits;
* ``MultiDiscrete(nvec)``: the logits of each component, concatenated;
* ``Box``: ``mean`` then ``log_std``, each of the action's flat size.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
LOGIT_BOUND = 30.0
"""Logits within +-this need no max-shift before ``exp`` (float32: no overflow, no zero,
and ``logp`` keeps about 1e-6 absolute precision)."""


@functools.lru_cache(maxsize=64)
def _row_numbers(n: int) -> np.ndarray:
    rows = np.arange(n)
    rows.flags.writeable = False
    return rows


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@dataclass(frozen=True)
class Categorical:
    n: int
    start: int = 0

    @property
    def num_inputs(self) -> int:
        return self.n

    def sample(
        self, inputs: np.ndarray, rng: np.random.Generator, explore: bool, bounded: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions and their log-probabilities for a batch of logits.

        ``bounded``: the caller knows every logit lies within +-LOGIT_BOUND (a tanh trunk
        with small enough head weights), so ``exp`` can neither overflow nor underflow
        to zero without subtracting the row maximum first. Otherwise logits of -inf
        (masked actions) are fine: their weight is 0 and they are never drawn.
        """
        if self.n == 2:
            return self._sample_two(inputs, rng, explore, bounded)
        if bounded:
            logits = inputs
            weights = np.exp(logits)
        else:
            logits = inputs - inputs.max(axis=-1, keepdims=True)
            weights = np.exp(logits)
        total = weights.sum(axis=-1)
        if explore:
            # Exponential race: with E_i ~ Exp(1) independent, argmin_i E_i / w_i is i with
            # probability w_i / sum(w). Three numpy calls, no normalisation, no cumsum. The
            # noise is float64: a draw of exactly 0 wins whatever the weight, and float32
            # draws are 0 about once in 1e7 (float64: 2^-53).
            noise = rng.standard_exponential(weights.shape)
            if bounded:
                actions = np.divide(noise, weights, out=noise).argmin(axis=1)
            else:
                with np.errstate(divide="ignore"):  # weight 0: E / 0 = inf, never the argmin
                    actions = np.divide(noise, weights, out=noise).argmin(axis=1)
        else:
            actions = logits.argmax(axis=1)
        logp = logits[_row_numbers(len(inputs)), actions]
        logp -= np.log(total)
        if self.start:
            actions += self.start
        return actions, logp.astype(np.float32, copy=False)

    def _sample_two(
        self, inputs: np.ndarray, rng: np.random.Generator, explore: bool, bounded: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Two actions: one logistic draw per row against the log-odds, in place.

        With ``d = logit_1 - logit_0``, ``P(1) = sigmoid(d)``, and a standard logistic draw
        ``L`` has ``P(L < d) = sigmoid(d)`` (the difference of two Gumbels, so this is the
        Gumbel-max trick with one draw instead of two). ``log P(a) = -log(1 + exp(-s))`` with
        ``s = d`` for action 1 and ``-d`` for action 0: ``logaddexp`` keeps it exact for any
        ``d``, including +-inf (an action of logit -inf: never drawn, the other has logp 0),
        so no max-shift is needed. With ``bounded`` logits ``|d| <= 60``: ``exp`` cannot
        overflow float32, so ``log P(a) = a * d - log1p(exp(d))`` (two SIMD calls cost less
        than ``logaddexp``'s one, and no masked write is needed). Ties of the greedy choice go to action 0, as ``argmax``'s.
        """
        d = np.subtract(inputs[:, 1], inputs[:, 0], dtype=np.float32)
        take = rng.logistic(size=len(d)) < d if explore else d > 0
        if bounded:  # log P(a) = a * d - softplus(d): no masked write (slow in numpy)
            logp = np.multiply(d, take)
            logp -= np.log1p(np.exp(d, out=d), out=d)
        else:
            np.negative(d, out=d, where=take)  # -s: -d where action 1 is taken, d where 0 is
            logp = np.logaddexp(0, d, out=d)
            np.negative(logp, out=logp)
        actions = take.astype(np.int64)
        if self.start:
            actions += self.start
        return actions, logp

    def sample_masked(
        self, inputs: np.ndarray, mask: np.ndarray, rng: np.random.Generator, explore: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`sample`, over the actions whose ``mask`` entry is nonzero only.

        Masked actions get logit -inf: weight 0, never the argmax, and their race time is
        set to +inf outright (so not even a noise draw of exactly 0 can pick one). ``logp``
        is under the renormalised (masked) distribution. Every row needs one allowed action.
        """
        allowed = mask.astype(np.bool_, copy=False)
        logits = np.where(allowed, inputs, -np.inf)
        logits -= logits.max(axis=-1, keepdims=True)
        weights = np.exp(logits)
        if explore:
            noise = rng.standard_exponential(weights.shape)
            with np.errstate(divide="ignore", invalid="ignore"):
                race = np.divide(noise, weights, out=noise)
            actions = np.where(allowed, race, np.inf).argmin(axis=1)
        else:
            actions = logits.argmax(axis=1)
        logp = logits[_row_numbers(len(inputs)), actions] - np.log(weights.sum(axis=-1))
        if self.start:
            actions += self.start
        return actions, logp.astype(np.float32, copy=False)

    def logp(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        index = actions.astype(np.int64)[:, None] - self.start
        return np.take_along_axis(_log_softmax(inputs), index, axis=-1)[:, 0]

    def uniform_logp(self) -> float:
        return -math.log(self.n)


@dataclass(frozen=True)
class MultiCategorical:
    nvec: tuple[int, ...]

    @property
    def num_inputs(self) -> int:
        return sum(self.nvec)

    def _parts(self, inputs: np.ndarray) -> list[np.ndarray]:
        return np.split(inputs, np.cumsum(self.nvec)[:-1], axis=-1)

    def sample(
        self, inputs: np.ndarray, rng: np.random.Generator, explore: bool, bounded: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        actions, logps = [], []
        for n, part in zip(self.nvec, self._parts(inputs), strict=True):
            a, lp = Categorical(n).sample(part, rng, explore, bounded)
            actions.append(a)
            logps.append(lp)
        return np.stack(actions, axis=-1), np.asarray(np.sum(logps, axis=0, dtype=np.float32))

    def logp(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        parts = self._parts(inputs)
        return sum(
            (Categorical(n).logp(p, actions[:, i]) for i, (n, p) in enumerate(zip(self.nvec, parts, strict=True))),
            start=np.zeros(len(inputs)),
        )

    def uniform_logp(self) -> float:
        return -sum(math.log(n) for n in self.nvec)


@dataclass(frozen=True)
class DiagGaussian:
    shape: tuple[int, ...]
    low: np.ndarray
    high: np.ndarray

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def num_inputs(self) -> int:
        return 2 * self.size

    def sample(
        self, inputs: np.ndarray, rng: np.random.Generator, explore: bool, bounded: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        del bounded  # no exp of the inputs here
        mean, log_std = inputs[:, : self.size], inputs[:, self.size :]
        if explore:
            eps = rng.standard_normal(mean.shape, dtype=np.float32)
            actions = mean + np.exp(log_std) * eps
            logp = (-0.5 * eps * eps - log_std - _HALF_LOG_2PI).sum(axis=-1)
        else:
            actions = mean
            logp = (-log_std - _HALF_LOG_2PI).sum(axis=-1)
        return actions.reshape((-1, *self.shape)).astype(np.float32), logp.astype(np.float32)

    def logp(self, inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        mean, log_std = inputs[:, : self.size], inputs[:, self.size :]
        z = (actions.reshape(len(actions), -1) - mean) / np.exp(log_std)
        return (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(axis=-1)

    def uniform_logp(self) -> float:
        width = (self.high - self.low).astype(np.float64)
        if not np.all(np.isfinite(width)):
            return float("nan")
        return float(-np.log(width).sum())


ActionDistribution = Categorical | MultiCategorical | DiagGaussian


def distribution_for(action_space: object) -> ActionDistribution:
    """The distribution the default policies use for a gymnasium action space."""
    from gymnasium import spaces  # imported here: this module's math needs only numpy

    if isinstance(action_space, spaces.Discrete):
        return Categorical(int(action_space.n), int(action_space.start))
    if isinstance(action_space, spaces.MultiDiscrete):
        if action_space.nvec.ndim != 1 or np.any(action_space.start != 0):
            raise ValueError(f"MultiDiscrete action spaces must be 1-D and start at 0, got {action_space}")
        return MultiCategorical(tuple(int(n) for n in action_space.nvec))
    if isinstance(action_space, spaces.Box) and np.issubdtype(action_space.dtype, np.floating):
        return DiagGaussian(tuple(action_space.shape), action_space.low, action_space.high)
    raise ValueError(
        f"unsupported action space {action_space}: use Discrete, MultiDiscrete or a float Box "
        "(or wrap the env to flatten it)"
    )

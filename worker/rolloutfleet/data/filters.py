"""Observation filters (RLlib's MeanStdFilter), in pure numpy.

A filter keeps two running statistics: ``stats`` (everything this filter knows,
including what other workers reported through a sync) and ``buffer`` (what this
worker saw since the last flush). A learner-side coordinator merges the workers'
buffers into a global filter and sends it back with :meth:`MeanStdFilter.sync`;
observations seen in between are kept, not lost.

Quarantine: an observation holding a NaN or an infinity never enters the statistics (one
would turn a whole fleet's mean into NaN for good); it is counted in
:attr:`MeanStdFilter.quarantined` and passed through the normalization as it is, so a NaN
stays visible in the batch. :meth:`RunningStat.is_finite` tells statistics read from
elsewhere that cannot be used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RunningStat:
    """Count, mean and sum of squared deviations (Chan et al.'s parallel update)."""

    shape: tuple[int, ...]
    count: float = 0.0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(0))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.mean.shape != self.shape:
            self.mean = np.zeros(self.shape, np.float64)
        if self.m2.shape != self.shape:
            self.m2 = np.zeros(self.shape, np.float64)

    def push_batch(self, values: np.ndarray) -> None:
        """Add a batch of observations, shape (n, *shape)."""
        n = values.shape[0]
        if n == 0:
            return
        batch_mean = values.mean(axis=0, dtype=np.float64)
        batch_m2 = ((values - batch_mean) ** 2).sum(axis=0, dtype=np.float64)
        self._merge(float(n), batch_mean, batch_m2)

    def is_finite(self) -> bool:
        """Whether these statistics can normalize anything: a finite, non-negative count and
        finite mean and squared deviations."""
        return (
            math.isfinite(self.count)
            and self.count >= 0
            and bool(np.isfinite(self.mean).all())
            and bool(np.isfinite(self.m2).all())
        )

    def merge(self, other: RunningStat) -> None:
        self._merge(other.count, other.mean, other.m2)

    def _merge(self, n: float, mean: np.ndarray, m2: np.ndarray) -> None:
        if n == 0:
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.count = total

    @property
    def var(self) -> np.ndarray:
        if self.count < 2:
            return np.ones(self.shape, np.float64)
        return self.m2 / (self.count - 1)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.var)

    def copy(self) -> RunningStat:
        return RunningStat(self.shape, self.count, self.mean.copy(), self.m2.copy())

    def to_dict(self) -> dict[str, Any]:
        return {"count": np.float64(self.count), "mean": self.mean.copy(), "m2": self.m2.copy()}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> RunningStat:
        mean = np.asarray(state["mean"], np.float64)
        return cls(mean.shape, float(state["count"]), mean.copy(), np.asarray(state["m2"], np.float64).copy())


class MeanStdFilter:
    """Normalize observations to zero mean, unit variance using running statistics.

    >>> f = MeanStdFilter((3,))
    >>> out = f(np.ones((4, 3), np.float32))   # updates the statistics, then normalizes
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, epsilon: float = 1e-8) -> None:
        self.shape = tuple(shape)
        self.clip = clip
        self.epsilon = epsilon
        self.stats = RunningStat(self.shape)
        self.buffer = RunningStat(self.shape)
        self.quarantined = 0
        """Observations kept out of the statistics because they held a NaN or an infinity."""

    def __call__(self, obs: np.ndarray, update: bool = True) -> np.ndarray:
        if update:
            batch = obs.reshape((-1, *self.shape))
            if batch.dtype == object:  # final observations collected from an object array
                batch = batch.astype(np.float64)
            finite = np.isfinite(batch).reshape(len(batch), -1).all(axis=1)
            if not finite.all():
                self.quarantined += int(len(batch) - np.count_nonzero(finite))
                batch = batch[finite]
            self.stats.push_batch(batch)
            self.buffer.push_batch(batch)
        with np.errstate(invalid="ignore"):  # inf - inf: a quarantined observation stays NaN
            normalized = (obs - self.stats.mean) / (self.stats.std + self.epsilon)
        return np.clip(normalized, -self.clip, self.clip).astype(np.float32)

    def flush(self) -> None:
        self.buffer = RunningStat(self.shape)

    def apply_changes(self, other: MeanStdFilter) -> None:
        """Fold another worker's buffer (observations it saw since its last flush) into ours."""
        self.stats.merge(other.buffer)

    def sync(self, other: MeanStdFilter) -> None:
        """Adopt another filter's statistics, keeping what we saw since our last flush."""
        self.adopt(other.stats)

    def adopt(self, stats: RunningStat) -> None:
        """Take ``stats`` (e.g. a fleet's merged statistics) plus what we saw since our last flush.

        Non-finite statistics raise ``ValueError``: adopting them would make every
        observation normalize to NaN from then on."""
        if not stats.is_finite():
            raise ValueError(f"refusing non-finite filter statistics (count {stats.count}, shape {stats.shape})")
        adopted = stats.copy()
        adopted.merge(self.buffer)
        self.stats = adopted

    def copy(self) -> MeanStdFilter:
        clone = MeanStdFilter(self.shape, self.clip, self.epsilon)
        clone.stats = self.stats.copy()
        clone.buffer = self.buffer.copy()
        clone.quarantined = self.quarantined
        return clone

    def get_state(self) -> dict[str, Any]:
        return {"stats": self.stats.to_dict(), "buffer": self.buffer.to_dict()}

    def set_state(self, state: dict[str, Any]) -> None:
        self.stats = RunningStat.from_dict(state["stats"])
        self.buffer = RunningStat.from_dict(state["buffer"])

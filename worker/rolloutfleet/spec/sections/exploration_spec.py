"""``policy.exploration``: how a policy departs from its greedy action while sampling.

* ``stochastic`` (the default): sample the model's action distribution;
* ``epsilonGreedy`` (Discrete actions): with probability ε a uniform random action, else
  the argmax of the model's logits (Q-values). ε is a constant (``epsilon``), a
  ``schedule`` over the learner's global step, or Ape-X's per-worker spread
  (``perWorker``: worker i of N takes ε_i = base^(1 + alpha·i/(N−1)));
* ``gaussian`` / ``ornsteinUhlenbeck`` (float Box actions): the mean plus noise of scale
  ``sigma`` (a constant or a ``schedule``) times the half-width of each bounded action
  dimension, clipped to the space. Ornstein-Uhlenbeck noise is correlated in time
  (``theta``: its pull back to 0 per step) and restarts at each episode.

>>> ExplorationSpec(type="epsilonGreedy", epsilon=0.1).constant_scale
0.1
>>> ExplorationSpec(type="gaussian").constant_scale
0.1
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rolloutfleet.spec.model_base import SpecModel, SubfieldError

ExplorationType = Literal["stochastic", "epsilonGreedy", "gaussian", "ornsteinUhlenbeck"]
NOISE_TYPES = ("gaussian", "ornsteinUhlenbeck")
DEFAULT_SIGMA = 0.1
"""Noise scale when neither ``sigma`` nor ``schedule`` is given (TD3's 0.1 of the action range)."""
DEFAULT_THETA = 0.15


class ScheduleSpec(SpecModel):
    """A scale (ε or σ) that moves from ``initial`` to ``final`` over the learner's first
    ``steps`` global steps and stays at ``final`` after: ``linear`` interpolates the value,
    ``exponential`` its logarithm (both ends must then be above 0)."""

    type: Literal["linear", "exponential"] = "linear"
    initial: float = Field(ge=0)
    final: float = Field(ge=0)
    steps: int = Field(ge=1)

    @model_validator(mode="after")
    def _positive_ends(self) -> ScheduleSpec:
        if self.type == "exponential":
            for name in ("initial", "final"):
                if getattr(self, name) <= 0:
                    raise SubfieldError(
                        name, f"an exponential schedule needs a value above 0, got {getattr(self, name)}"
                    )
        return self


class PerWorkerEpsilonSpec(SpecModel):
    """Ape-X's spread: worker i of N samples with ε_i = base^(1 + alpha·i/(N−1)) (one worker: base)."""

    base: float = Field(default=0.4, ge=0, le=1)
    alpha: float = Field(default=7.0, ge=0)


class ExplorationSpec(SpecModel):
    """``policy.exploration``; see the module docstring."""

    type: ExplorationType = "stochastic"
    epsilon: float | None = Field(default=None, ge=0, le=1)
    """epsilonGreedy: a constant ε."""
    per_worker: PerWorkerEpsilonSpec | None = None
    """epsilonGreedy: a constant ε per worker, spread as in Ape-X."""
    sigma: float | None = Field(default=None, ge=0)
    """gaussian / ornsteinUhlenbeck: a constant noise scale (default 0.1), in half-widths of the action space."""
    schedule: ScheduleSpec | None = None
    """ε (epsilonGreedy) or σ (noise) following the learner's global step."""
    theta: float | None = Field(default=None, gt=0, le=1)
    """ornsteinUhlenbeck: the pull towards 0 per step (default 0.15)."""

    @field_validator("epsilon", mode="before")
    @classmethod
    def _probability(cls, value: object) -> object:
        if isinstance(value, int | float) and not 0 <= value <= 1:
            raise ValueError(f"ε must be within [0, 1], got {value}")
        return value

    @model_validator(mode="after")
    def _fields_fit_the_type(self) -> ExplorationSpec:
        kind = self.type
        allowed = {
            "stochastic": (),
            "epsilonGreedy": ("epsilon", "per_worker", "schedule"),
            "gaussian": ("sigma", "schedule"),
            "ornsteinUhlenbeck": ("sigma", "schedule", "theta"),
        }[kind]
        for name in ("epsilon", "per_worker", "sigma", "schedule", "theta"):
            if getattr(self, name) is not None and name not in allowed:
                alias = "perWorker" if name == "per_worker" else name
                raise SubfieldError(alias, f"does not apply to type {kind!r}")
        given = [name for name in ("epsilon", "per_worker", "sigma", "schedule") if getattr(self, name) is not None]
        if len(given) > 1:
            names = " and ".join("perWorker" if name == "per_worker" else name for name in given)
            raise SubfieldError(given[1] if given[1] != "per_worker" else "perWorker", f"give one of {names}, not both")
        if kind == "epsilonGreedy" and not given:
            raise SubfieldError("epsilon", "epsilonGreedy needs 'epsilon' (e.g. 0.1), a 'schedule' or 'perWorker'")
        if kind == "epsilonGreedy" and self.schedule is not None:
            for name in ("initial", "final"):
                value = getattr(self.schedule, name)
                if value > 1:
                    raise SubfieldError(f"schedule.{name}", f"ε must be within [0, 1], got {value}")
        return self

    @property
    def constant_scale(self) -> float | None:
        """The one ε or σ of every worker and global step, or None (a schedule or a per-worker spread)."""
        if self.type == "epsilonGreedy":
            return self.epsilon
        if self.type in NOISE_TYPES and self.schedule is None:
            return DEFAULT_SIGMA if self.sigma is None else self.sigma
        return None

    @property
    def follows_global_step(self) -> bool:
        """Whether the scale changes with the learner's global step (a worker polls it then)."""
        return self.schedule is not None


def schedule_value(schedule: ScheduleSpec, global_step: int) -> float:
    """The schedule's value at ``global_step`` (steps before 0 count as 0).

    >>> s = ScheduleSpec(type="linear", initial=1.0, final=0.1, steps=100)
    >>> schedule_value(s, 0), schedule_value(s, 50), schedule_value(s, 100), schedule_value(s, 10**9)
    (1.0, 0.55, 0.1, 0.1)
    >>> round(schedule_value(ScheduleSpec(type="exponential", initial=1.0, final=0.01, steps=100), 50), 6)
    0.1
    """
    if global_step >= schedule.steps:
        return schedule.final
    fraction = max(global_step, 0) / schedule.steps
    if schedule.type == "linear":
        return schedule.initial + fraction * (schedule.final - schedule.initial)
    return float(schedule.initial * (schedule.final / schedule.initial) ** fraction)


def per_worker_epsilon(spread: PerWorkerEpsilonSpec, worker_index: int, num_workers: int) -> float:
    """Ape-X's ε of worker ``worker_index`` (0-based) of ``num_workers``.

    >>> spread = PerWorkerEpsilonSpec()
    >>> per_worker_epsilon(spread, 0, 8), round(per_worker_epsilon(spread, 7, 8), 6)
    (0.4, 0.000655)
    """
    if num_workers <= 1:
        return spread.base
    return float(spread.base ** (1 + spread.alpha * worker_index / (num_workers - 1)))

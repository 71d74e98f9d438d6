"""``spec.env.external``: the job's env runs outside the fleet and calls its workers for actions.

Each worker serves an action endpoint on ``port`` (:mod:`rolloutfleet.external`) instead of
stepping envs; simulators talk to it through :class:`rolloutfleet.client.PolicyClient`. The
spaces come from ``spec.env.id`` (a gymnasium id, built once for its spaces, never stepped) or
are declared here::

    env:
      external: {port: 9900, maxClients: 64, episodeTimeoutSeconds: 60,
                 observationSpace: {type: Box, shape: [4]}, actionSpace: {type: Discrete, n: 2}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.model_base import SubfieldError as _SubfieldError

DEFAULT_PORT = 9900
PORT_VARIABLE = "ROLLOUTFLEET_EXTERNAL_PORT"
"""Overrides ``port`` for one worker process (the local fleet gives worker ``i`` ``port + i``)."""
MAX_CLIENTS = 4096
MAX_SPACE_SIZE = 1 << 20
"""The most elements a declared Box may hold (a typo guard, as the CRD's maximum)."""


class SpaceSpec(_Model):
    """A declared gymnasium space: ``Box`` (``shape``, ``low``, ``high``, ``dtype``) or ``Discrete`` (``n``)."""

    type: Literal["Box", "Discrete"]
    shape: list[int] | None = None
    """Box: the shape of one observation or action, e.g. ``[4]``."""
    low: float | None = None
    """Box: the lower bound of every element (default: unbounded)."""
    high: float | None = None
    """Box: the upper bound of every element (default: unbounded)."""
    dtype: Literal["float32", "float64"] = "float32"
    n: int | None = Field(default=None, ge=1)
    """Discrete: the number of values ``0 .. n-1``."""

    @model_validator(mode="after")
    def _fields_of_its_type(self) -> SpaceSpec:
        if self.type == "Discrete":
            if self.n is None:
                raise _SubfieldError("n", "a Discrete space needs n (the number of values)")
            if self.shape is not None or self.low is not None or self.high is not None:
                raise _SubfieldError("shape", "a Discrete space has only n; shape, low and high are for Box")
            return self
        if self.n is not None:
            raise _SubfieldError("n", "is for Discrete; a Box has shape, low, high, dtype")
        if self.shape is None or not self.shape or any(size < 1 for size in self.shape):
            raise _SubfieldError("shape", f"a Box needs a non-empty list of positive sizes, got {self.shape}")
        size = 1
        for dim in self.shape:
            size *= dim
        if size > MAX_SPACE_SIZE:
            raise _SubfieldError("shape", f"at most {MAX_SPACE_SIZE} elements, got {size}")
        if self.low is not None and self.high is not None and self.low >= self.high:
            raise _SubfieldError("low", f"must be below high ({self.low} >= {self.high})")
        return self


class ExternalSpec(_Model):
    """Serve actions to simulators that run on their own (game engines, robots, legacy simulators)."""

    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    """The action endpoint's TCP port on each worker (the job's Service targets it on Kubernetes;
    ``rolloutfleet run`` gives local worker ``i`` port ``port + i``)."""
    max_clients: int = Field(default=64, ge=1, le=MAX_CLIENTS)
    """Clients served at once per worker; one more is refused with the reason (HTTP 503)."""
    episode_timeout_seconds: float = Field(default=60.0, gt=0, le=86400)
    """An episode with no call for this long (its client vanished) is closed as truncated (counted)."""
    observation_space: SpaceSpec | None = None
    """The observations' space when ``spec.env.id`` does not name one."""
    action_space: SpaceSpec | None = None
    """The actions' space when ``spec.env.id`` does not name one."""

    @model_validator(mode="after")
    def _both_spaces_or_neither(self) -> ExternalSpec:
        if (self.observation_space is None) != (self.action_space is None):
            missing = "actionSpace" if self.action_space is None else "observationSpace"
            raise _SubfieldError(missing, "declare both observationSpace and actionSpace, or neither (then env.id)")
        return self

    @property
    def declares_spaces(self) -> bool:
        return self.observation_space is not None


def local_port(external: ExternalSpec, worker_index: int) -> int:
    """Worker ``worker_index``'s port in a local fleet, where the workers share one machine.

    >>> local_port(ExternalSpec(port=9900), 2)
    9902
    """
    return external.port + worker_index

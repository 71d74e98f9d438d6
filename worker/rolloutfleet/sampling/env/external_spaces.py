"""The spaces of an external env, and what crosses the wire: observations in, actions out, as JSON.

An observation is checked against the space before anything is recorded (shape, kind of
number, a Discrete value in range); a wrong one raises :class:`BadInput` naming what was
expected. Nothing a client sends is ever unpickled: JSON numbers and lists only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from rolloutfleet.spec.job import EnvSpec, SpecError
from rolloutfleet.spec.sections.external import SpaceSpec


class ExternalError(Exception):
    """A call the server refuses; ``status`` is its HTTP status, the message goes to the client."""

    status = 400
    kind: str | None = None
    """A word for clients to act on (``"elsewhere"``), beside the message."""


class BadInput(ExternalError):
    """An observation, a reward or a request body that does not fit (the episode is dropped)."""


class TooLarge(BadInput):
    """A request body past the server's bound (``MAX_BODY_BYTES``)."""

    status = 413


class UnknownEpisode(ExternalError):
    status = 404


class EpisodeElsewhere(UnknownEpisode):
    """An id another worker gave (or an earlier run of this one): the episode cannot continue
    here. The client's answer says ``"kind": "elsewhere"``; a PolicyClient that started the
    episode continues it in a new episode on this worker (docs/external-simulators.md)."""

    kind = "elsewhere"


class EpisodeEnded(ExternalError):
    status = 409


class ServerFailed(ExternalError):
    """The forward pass raised (a custom model's bug): the calls waiting on it get the reason."""

    status = 500


class Refused(ExternalError):
    """The server is full (``maxClients``) or stopping."""

    status = 503


class Stopping(Refused):
    """The worker is stopping: the call did nothing (a client retries on a new connection,
    which a Service sends to another worker)."""

    kind = "stopping"


def declared_space(spec: SpaceSpec) -> spaces.Space[Any]:
    if spec.type == "Discrete":
        assert spec.n is not None  # SpaceSpec's validator
        return spaces.Discrete(spec.n)
    assert spec.shape is not None
    low = -np.inf if spec.low is None else spec.low
    high = np.inf if spec.high is None else spec.high
    return spaces.Box(low, high, tuple(spec.shape), np.dtype(spec.dtype))


def external_spaces(env: EnvSpec) -> tuple[spaces.Space[Any], spaces.Space[Any]] | None:
    """The declared ``(observation_space, action_space)``; None when they come from ``env.id``."""
    external = env.external
    if external is None or external.observation_space is None or external.action_space is None:
        return None
    return declared_space(external.observation_space), declared_space(external.action_space)


def check_served_spaces(observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
    """An external env serves flat observations (Box, Discrete) and Box or Discrete actions."""
    for what, space in (("observation", observation_space), ("action", action_space)):
        if not isinstance(space, spaces.Box | spaces.Discrete):
            raise SpecError(f"spec.env.external: serves Box or Discrete {what}s, this env's are {space}")


def parse_obs(space: spaces.Space[Any], value: Any) -> np.ndarray:
    """A client's observation as the space's array; :class:`BadInput` naming the mismatch."""
    if isinstance(space, spaces.Discrete):
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadInput(f"obs: expected an integer in [{space.start}, {space.start + space.n}), got {value!r:.80}")
        if not space.contains(np.int64(value)):
            raise BadInput(f"obs: {value} is outside Discrete({space.n}, start={space.start})")
        return np.asarray(value, np.int64)
    assert isinstance(space, spaces.Box)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):  # ragged nesting
        raise BadInput(f"obs: expected a {list(space.shape)} array of numbers, got a ragged list") from None
    if array.dtype.kind not in "iuf":
        raise BadInput(f"obs: expected numbers ({space.dtype}), got {_kind(array)}")
    if array.shape != space.shape:
        raise BadInput(f"obs: expected shape {list(space.shape)}, got {list(array.shape)}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        # As a reward: a NaN or inf would reach the policy's forward pass and the training rows.
        where = np.argwhere(~np.isfinite(array))[0].tolist()
        raise BadInput(f"obs: expected finite numbers, got {array[tuple(where)]} at {where}")
    return array.astype(space.dtype)


def _kind(array: np.ndarray) -> str:
    return {"b": "booleans", "U": "strings", "O": "mixed values or null"}.get(array.dtype.kind, str(array.dtype))


def parse_reward(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInput(f"reward: expected a finite number, got {value!r:.80}")
    return float(value)


def action_to_json(space: spaces.Space[Any], action: np.ndarray) -> Any:
    """An action as the client receives it: an int (Discrete) or a nested list of floats (Box)."""
    if isinstance(space, spaces.Discrete):
        return int(action)
    return np.asarray(action).tolist()

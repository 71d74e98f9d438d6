"""Is what an env returned an observation of its space? A string from ``reset``, a list of
words, a dict where a Box was declared: said in one line naming what came back, before it
reaches a buffer of the space's dtype (where it would be a traceback, or garbage).

Multi-agent envs: :class:`AgentsObsCheck`, agent by agent. Pure (numpy and gymnasium spaces only). Text, Graph and other leaves are not checked here
(:func:`rolloutfleet.inference.obs_spaces.obs_parts` refuses them up front).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

_NUMERIC = "biuf"  # bool, signed, unsigned, float


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:57] + '...'} ({type(value).__name__})"


def obs_problem(space: spaces.Space[Any], obs: Any) -> str | None:
    """Why ``obs`` is not an observation of ``space`` (one line), or None.

    >>> obs_problem(spaces.Box(0, 1, (2,)), "hello")
    "'hello' (str), not an observation of Box(0.0, 1.0, (2,), float32)"
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, Mapping):
            return f"{_shown(obs)}, not an observation of {space}"
        for key, sub in space.spaces.items():
            if key not in obs:
                return f"an observation without {key!r} (the space has {', '.join(map(repr, space.spaces))})"
            if (problem := obs_problem(sub, obs[key])) is not None:
                return f"[{key!r}]: {problem}"
        return None
    if isinstance(space, spaces.Tuple):
        if not isinstance(obs, Sequence) or isinstance(obs, str) or len(obs) != len(space.spaces):
            return f"{_shown(obs)}, not an observation of {space}"
        for index, (sub, part) in enumerate(zip(space.spaces, obs, strict=True)):
            if (problem := obs_problem(sub, part)) is not None:
                return f"[{index}]: {problem}"
        return None
    if not isinstance(space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
        return None
    try:
        array = np.asarray(obs)
    except (ValueError, TypeError):  # ragged
        return f"{_shown(obs)}, not an observation of {space}"
    if array.dtype.kind not in _NUMERIC:
        return f"{_shown(obs)}, not an observation of {space}"
    if array.shape != space.shape:
        return f"an observation of shape {array.shape}, expected {space.shape}"
    return None


_ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class AgentsObsCheck:
    """Why an agent's entry in an observation dict is not an observation of its space
    (``space_of(agent)``, asked once per agent; None: not checked), naming the agent; or None.

    Every step of every agent goes through it: an agent whose space is one array (Box,
    Discrete, MultiDiscrete, MultiBinary) and whose observation is a numeric ndarray of the
    space's shape passes in one comparison, without :func:`obs_problem`'s walk.

    >>> AgentsObsCheck(lambda agent: spaces.Discrete(3))({"a0": 1, "a1": "x"})
    "for agent 'a1' 'x' (str), not an observation of Discrete(3)"
    """

    def __init__(self, space_of: Callable[[Any], spaces.Space[Any] | None]) -> None:
        self._space_of = space_of
        self._spaces: dict[Any, tuple[spaces.Space[Any] | None, tuple[int, ...] | None]] = {}

    def _space(self, agent: Any) -> tuple[spaces.Space[Any] | None, tuple[int, ...] | None]:
        space = self._space_of(agent)
        shape = space.shape if isinstance(space, _ARRAY_SPACES) else None
        self._spaces[agent] = entry = (space, shape)
        return entry

    def __call__(self, obs: Mapping[Any, Any]) -> str | None:
        known = self._spaces
        for agent, value in obs.items():
            space, shape = known.get(agent) or self._space(agent)
            if space is None:
                continue
            if type(value) is np.ndarray and value.shape == shape and value.dtype.kind in _NUMERIC:
                continue
            if (problem := obs_problem(space, value)) is not None:
                return f"for agent {agent!r} {problem}"
        return None

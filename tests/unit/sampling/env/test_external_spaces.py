"""What an external env accepts from a client, and what it answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rolloutfleet.sampling.env.external_spaces import BadInput, action_to_json, declared_space, parse_obs, parse_reward
from rolloutfleet.spec.sections.external import SpaceSpec

BOX = spaces.Box(-1.0, 1.0, (2, 2), np.float32)


def test_an_observation_becomes_the_spaces_array_exactly() -> None:
    value = np.float32([[0.1, -0.2], [1e-8, 3.4028235e38]])
    obs = parse_obs(BOX, value.tolist())  # JSON carries float32 values as doubles: exact both ways
    assert obs.dtype == np.float32 and np.array_equal(obs, value)
    assert parse_obs(spaces.Discrete(3), 2) == 2


@pytest.mark.parametrize(
    ("space", "value", "message"),
    [
        (BOX, [1.0, 2.0], r"obs: expected shape \[2, 2\], got \[2\]"),
        (BOX, [[1.0, 2.0], [3.0]], "ragged"),
        (BOX, [["a", "b"], ["c", "d"]], r"obs: expected numbers \(float32\), got strings"),
        (BOX, [[True, False], [True, True]], "got booleans"),
        (BOX, None, "got mixed values or null"),
        (spaces.Discrete(3), 3, r"obs: 3 is outside Discrete\(3"),
        (spaces.Discrete(3), 1.5, "obs: expected an integer"),
        (spaces.Discrete(3), True, "obs: expected an integer"),
    ],
)
def test_a_wrong_observation_is_named(space: spaces.Space[Any], value: Any, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        parse_obs(space, value)


@pytest.mark.parametrize("value", ["1", None, float("nan"), True])
def test_a_reward_is_a_finite_number(value: Any) -> None:
    with pytest.raises(BadInput, match="reward: expected a finite number"):
        parse_reward(value)


def test_declared_spaces_and_actions_on_the_wire() -> None:
    box = declared_space(SpaceSpec(type="Box", shape=[3], low=-2, dtype="float64"))
    assert isinstance(box, spaces.Box) and box.shape == (3,) and box.dtype == np.float64
    assert float(box.low[0]) == -2 and np.isinf(box.high).all()
    assert declared_space(SpaceSpec(type="Discrete", n=5)) == spaces.Discrete(5)
    assert action_to_json(spaces.Discrete(5), np.int64(4)) == 4
    assert action_to_json(box, np.array([0.5, 1.0, -1.0])) == [0.5, 1.0, -1.0]

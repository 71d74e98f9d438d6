"""Structured observations: which leaf the model reads, the mask's shape, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rolloutfleet.inference.obs_spaces import check_masks, obs_parts
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, SpecError

BOARD = spaces.Box(0, 1, (3, 3, 2), np.int8)
CLASSIC = spaces.Dict({"observation": BOARD, "action_mask": spaces.Box(0, 1, (9,), np.int8)})


def test_pettingzoo_classic_spaces_read_the_board_flat_with_a_mask() -> None:
    from pettingzoo.classic import connect_four_v3, tictactoe_v3

    for module, n in ((tictactoe_v3, 9), (connect_four_v3, 7)):
        env = module.env()
        space, actions = env.observation_space("player_1"), env.action_space("player_1")
        parts = obs_parts(space, actions)
        assert parts.leaf == "observation" and parts.masked
        assert parts.model_space.shape == (int(np.prod(space["observation"].shape)),)
        assert space["action_mask"].shape == (n,)


def test_plain_spaces_are_read_whole_and_uint8_images_stay_images() -> None:
    box = spaces.Box(-1, 1, (4,))
    assert obs_parts(box, spaces.Discrete(2)).model_space is box
    image = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    assert obs_parts(spaces.Dict({"observation": image}), spaces.Discrete(2)).model_space is image


@pytest.mark.parametrize(
    ("space", "actions", "message"),
    [
        (spaces.Dict({"observation": BOARD, "text": spaces.Text(5)}), spaces.Discrete(9), r"leaves \['text'\]"),
        (spaces.Dict({"observation": spaces.Text(5)}), spaces.Discrete(9), r"unsupported leaf 'observation': Text"),
        (spaces.Dict({"action_mask": spaces.MultiBinary(9)}), spaces.Discrete(9), r"no 'observation' leaf"),
        (CLASSIC, spaces.Discrete(8), r"leaf 'action_mask'.*shape \(8,\)"),
        (CLASSIC, spaces.Box(-1, 1, (9,)), r"leaf 'action_mask' needs a Discrete action space"),
    ],
)
def test_unreadable_dict_spaces_are_one_line_naming_the_leaf(
    space: spaces.Space[object], actions: spaces.Space[object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        obs_parts(space, actions)
    with pytest.raises(SpecError, match=r"^spec\.policy: .*" + message):
        Policy(PolicySpec(hidden=[8]), space, actions, seed=0)


def test_an_empty_mask_names_its_agent() -> None:
    mask = np.array([[1, 0], [0, 0]], np.bool_)
    with pytest.raises(ValueError, match=r"agent 'player_2': its action_mask allows no action"):
        check_masks(mask, ["player_1", "player_2"])
    check_masks(mask[:1], ["player_1"])

"""Structured observations: which leaf the model reads, the mask's shape, leaf encodings, one-line errors."""

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
        (spaces.Dict({"observation": BOARD, "text": spaces.Text(5)}), spaces.Discrete(9), r"leaf 'text': Text\("),
        (
            spaces.Dict({"observation": spaces.Text(5)}),
            spaces.Discrete(9),
            r"unsupported observation leaf 'observation': Text",
        ),
        (
            spaces.Tuple((BOARD, spaces.Dict({"g": spaces.Graph(spaces.Box(0, 1, (2,)), None)}))),
            spaces.Discrete(9),
            r"unsupported observation leaf '1/g': Graph\(",
        ),
        (spaces.Text(5), spaces.Discrete(9), r"unsupported observation space Text\("),
        (spaces.Dict({"action_mask": spaces.MultiBinary(9)}), spaces.Discrete(9), r"no leaf besides 'action_mask'"),
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


def test_dict_and_tuple_leaves_are_named_by_path_and_encoded_flat() -> None:
    space = spaces.Dict(
        {
            "arm": spaces.Tuple((spaces.Box(-2, 2, (2, 1)), spaces.Discrete(3, start=1))),
            "bits": spaces.MultiBinary(2),
            "dice": spaces.MultiDiscrete([2, 3]),
            "action_mask": spaces.MultiBinary(4),
        }
    )
    parts = obs_parts(space, spaces.Discrete(4))
    assert parts.paths == ("action_mask", "arm/0", "arm/1", "bits", "dice")  # gymnasium sorts Dict keys
    assert parts.masked and parts.leaf is None and parts.model_space.shape == (2 + 3 + 2 + 5,)
    sample = {
        "arm/0": np.array([[[0.5], [-1.0]]], np.float32),
        "arm/1": np.array([3]),
        "bits": np.array([[1, 0]], np.int8),
        "dice": np.array([[1, 2]]),
        "action_mask": np.array([[1, 1, 1, 1]], np.int8),
    }
    encoded = parts.model_input(sample)
    assert encoded.dtype == np.float32
    assert encoded.tolist() == [[0.5, -1.0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1]]
    # The leaves the model reads are exactly its encoding's length, and gymnasium agrees on the flat size.
    assert encoded.shape[1] == spaces.flatdim(
        spaces.Dict({k: v for k, v in space.spaces.items() if k != "action_mask"})
    )


def test_a_single_image_leaf_stays_an_image_and_uint8_leaves_are_scaled_when_encoded() -> None:
    image = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    parts = obs_parts(spaces.Dict({"pixels": image, "action_mask": spaces.MultiBinary(2)}), spaces.Discrete(2))
    assert parts.leaf == "pixels" and parts.model_space is image
    mixed = obs_parts(spaces.Tuple((spaces.Box(0, 255, (2,), np.uint8), spaces.Discrete(2))), spaces.Discrete(2))
    encoded = mixed.model_input({"0": np.array([[255, 51]], np.uint8), "1": np.array([0])})
    np.testing.assert_allclose(encoded, [[1.0, 0.2, 1.0, 0.0]], rtol=1e-6)

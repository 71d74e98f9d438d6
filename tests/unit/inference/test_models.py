from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.models import DefaultModel


@pytest.mark.parametrize(
    ("obs_space", "act_space", "outputs"),
    [
        (spaces.Box(-1, 1, (4,)), spaces.Discrete(2), 2),
        (spaces.MultiDiscrete([2, 5]), spaces.Discrete(3), 3),
        (spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6), 6),
        (spaces.Box(0, 1, (10, 10, 1), np.float32), spaces.Box(-1, 1, (3,)), 6),
    ],
)
def test_default_model_shapes(obs_space: spaces.Space, act_space: spaces.Space, outputs: int) -> None:
    model = DefaultModel(obs_space, act_space, distribution_for(act_space))
    obs = torch.as_tensor(np.stack([obs_space.sample() for _ in range(3)]))
    logits, values = model(obs)
    assert logits.shape == (3, outputs)
    assert values.shape == (3,)


def test_unsupported_spaces_say_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"policy\.entryPoint"):
        DefaultModel(spaces.Text(5), spaces.Discrete(2), distribution_for(spaces.Discrete(2)))
    with pytest.raises(ValueError, match="unsupported action space"):
        distribution_for(spaces.MultiBinary(3))


def test_a_frame_stack_is_read_channels_first_as_an_hwc_image_is_read_channels_last() -> None:
    """The same frames, stacked (4, 84, 84) or as HWC (84, 84, 4), give the same Nature CNN the same
    features once the two models share weights: both layouts reach the convolutions as CHW."""
    stacked = DefaultModel(
        spaces.Box(0, 255, (4, 84, 84), np.uint8), spaces.Discrete(6), distribution_for(spaces.Discrete(6))
    )
    hwc = DefaultModel(
        spaces.Box(0, 255, (84, 84, 4), np.uint8), spaces.Discrete(6), distribution_for(spaces.Discrete(6))
    )
    hwc.load_state_dict(stacked.state_dict())
    first = next(m for m in stacked.modules() if isinstance(m, torch.nn.Conv2d))
    assert (first.in_channels, first.kernel_size, first.stride) == (4, (8, 8), (4, 4))
    frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    logits_stacked, values_stacked = stacked(frames)
    logits_hwc, values_hwc = hwc(frames.permute(0, 2, 3, 1))
    torch.testing.assert_close(logits_stacked, logits_hwc)
    torch.testing.assert_close(values_stacked, values_hwc)


def test_image_leaves_of_a_dict_each_reach_their_own_cnn_as_the_images_they_were() -> None:
    from rolloutfleet.inference.models import ImageLeaves
    from rolloutfleet.inference.obs_spaces import obs_parts

    space = spaces.Dict(
        {
            "left": spaces.Box(0, 255, (6, 7, 3), np.uint8),
            "speed": spaces.Box(-1, 1, (2,), np.float32),
            "gear": spaces.Discrete(3),
            "right": spaces.Box(0, 255, (4, 9, 9), np.uint8),  # channels first (a frame stack)
        }
    )
    parts = obs_parts(space, spaces.Discrete(2))
    # Dict leaves in gymnasium's (sorted) order: gear (one-hot 3), left (126), right (324), speed (2).
    assert parts.images == ((3, (6, 7, 3)), (3 + 126, (4, 9, 9)))
    rows = [space.sample() for _ in range(5)]
    columns = {path: np.stack([row[path] for row in rows]) for path in parts.paths}
    x = torch.as_tensor(parts.model_input(columns))
    leaves = ImageLeaves(x.shape[1], parts.images)
    with torch.no_grad():
        out = leaves(x)
        left = leaves.cnns[0](torch.as_tensor(columns["left"] / 255.0, dtype=torch.float32))
        right = leaves.cnns[1](torch.as_tensor(columns["right"] / 255.0, dtype=torch.float32))
    assert out.shape == (5, 512 + 512 + 3 + 2) == (5, leaves.features)
    torch.testing.assert_close(out[:, :512], left)
    torch.testing.assert_close(out[:, 512:1024], right)
    np.testing.assert_array_equal(out[:, 1024:1027].numpy(), np.eye(3, dtype=np.float32)[columns["gear"]])
    np.testing.assert_array_equal(out[:, 1027:].numpy(), columns["speed"])

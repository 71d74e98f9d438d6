"""The vectorized sampler's grid on its own: rows written by hand, cut and carried over."""

from __future__ import annotations

import numpy as np

from rolloutfleet.data import batch as sb
from rolloutfleet.sampling.grid import OBS_BUF, SEQ_NO, TICK, VALID, Grid

SPECS = {sb.REWARDS: ((), np.float32), VALID: ((), np.bool_)}


def filled_grid(steps: int, num_envs: int = 2) -> Grid:
    """``steps`` rows of ``num_envs`` sub-envs: reward = 10 * step + env, obs = step (new_obs = step + 1)."""
    grid = Grid(num_envs, SPECS, (1,), np.float32)
    grid.ensure_capacity(steps)
    for s in range(steps):
        grid.columns[sb.REWARDS][s] = [10 * s + i for i in range(num_envs)]
        grid.columns[OBS_BUF][s + 1] = s + 1
    grid.columns[OBS_BUF][0] = 0
    grid.columns[VALID][:steps] = True
    grid.columns[SEQ_NO][:steps] = 4
    grid.filled = steps
    return grid


def test_growing_keeps_the_rows_already_stepped() -> None:
    grid = filled_grid(3)
    assert grid.capacity == 3
    grid.ensure_capacity(4)
    assert grid.capacity == 6  # doubles: a worker grows a handful of times, not every step
    assert grid.columns[sb.REWARDS][:3].tolist() == [[0, 1], [10, 11], [20, 21]]
    assert grid.columns[OBS_BUF][:4, 0, 0].tolist() == [0, 1, 2, 3]  # and the next obs


def test_layout_is_env_major_and_gather_reads_the_rows() -> None:
    grid = filled_grid(3)
    grid.columns[VALID][1, 0] = False  # a reset step of env 0
    layout = grid.layout()
    assert layout.env.tolist() == [0, 0, 1, 1, 1] and layout.step.tolist() == [0, 2, 0, 1, 2]
    assert layout.rank.tolist() == [0, 1, 0, 1, 2] and layout.flat.tolist() == [0, 4, 1, 3, 5]
    assert grid.gather(sb.REWARDS, layout.flat).tolist() == [0, 20, 1, 11, 21]
    assert grid.gather(sb.ENV_ID, layout.flat).tolist() == [0, 0, 1, 1, 1]
    assert grid.gather(sb.NEW_OBS, layout.flat)[:, 0].tolist() == [1, 3, 1, 2, 3]
    assert grid.gather(sb.WEIGHTS_SEQ_NO, layout.flat).tolist() == [4] * 5
    assert grid.valid_rows().tolist() == [0, 1, 3, 4, 5]  # time order


def test_final_observations_replace_new_obs_of_their_row() -> None:
    grid = filled_grid(2)
    grid.final_obs[1 * 2 + 1] = np.array([99.0], np.float32)  # env 1 ended at row 1
    assert grid.new_obs(1, 1).tolist() == [99.0] and grid.new_obs(1, 0).tolist() == [2.0]
    assert grid.gather(sb.NEW_OBS, np.array([3, 2, 1]))[:, 0].tolist() == [99, 2, 1]


def test_keep_rest_moves_the_tail_to_the_front_and_counts_ticks() -> None:
    grid = filled_grid(4)
    grid.final_obs[3 * 2 + 0] = np.array([77.0], np.float32)
    layout = grid.layout()
    rest = layout.step >= 2  # rows of steps 2 and 3 stay
    rest[layout.flat == 5] = False  # env 1's step 2 row was taken
    grid.keep_rest(layout, rest)
    assert (grid.filled, grid.tick) == (2, 2)
    assert grid.columns[sb.REWARDS][:2].tolist() == [[20, 21], [30, 31]]
    assert grid.columns[VALID][:2].tolist() == [[True, False], [True, True]]
    assert grid.columns[OBS_BUF][:3, 0, 0].tolist() == [2, 3, 4]
    assert list(grid.final_obs) == [1 * 2 + 0]  # its row moved with it
    assert grid.gather(TICK, np.array([0, 3])).tolist() == [2, 3]

"""The soak's chart, read back as an image by matplotlib: the size asked for, each series
in its colour where its values put it, the goal line below a series above it."""

from __future__ import annotations

import io

import numpy as np
from matplotlib import colors
from matplotlib.image import imread

from bench.plots import Panel, Series, line_chart_png


def rows_of(image: np.ndarray, colour: str) -> np.ndarray:
    """The pixel rows in which at least 100 pixels are (nearly) ``colour``."""
    rgb = np.array(colors.to_rgb(colour))
    near = np.abs(image[:, :, :3] - rgb).max(axis=2) < 0.08
    return np.flatnonzero(near.sum(axis=1) >= 100)


def test_a_chart_has_the_size_asked_and_its_lines_where_the_data_puts_them() -> None:
    panels = [
        Panel("RSS (MB)", [Series("worker-0", [(0.0, 10.0), (60.0, 10.0)])]),
        Panel("growth (%)", [Series("worker-0", [(0.0, 8.0), (60.0, 8.0)])], goal=5.0),
    ]
    image = imread(io.BytesIO(line_chart_png(panels, "minutes", shade_until=6.0, width_in=8, panel_height_in=3)))
    assert image.shape[:2] == (600, 800)
    series_rows = rows_of(image, "C0")  # the first series' colour, in both panels
    goal_rows = rows_of(image, "black")
    assert series_rows.size and (series_rows < 300).any() and (series_rows >= 300).any()
    lower_series = series_rows[series_rows >= 300].min()
    dashed_goal = [r for r in goal_rows if r > lower_series and r < 560]  # axes' black frame aside
    assert dashed_goal, "no goal line below the series at 8 % (goal 5 %)"


def test_each_series_keeps_its_colour_across_panels() -> None:
    a, b = Series("a", [(0, 1), (1, 1)]), Series("b", [(0, 2), (1, 2)])
    image = imread(
        io.BytesIO(line_chart_png([Panel("x", [a, b]), Panel("y", [b])], "t", width_in=6, panel_height_in=3))
    )
    second = rows_of(image, "C1")
    assert (second < 300).any() and (second >= 300).any()  # b is C1 in both panels
    assert not (rows_of(image, "C0") >= 300).any()  # a is only in the first

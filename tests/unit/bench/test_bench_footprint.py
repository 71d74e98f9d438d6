"""bench_footprint's JSON: this run's medians beside the targets and the anchor from before
issue 15; a target or figure that does not exist is null (no bar), and the plot shows the
larger RSS as the taller bar."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colors
from matplotlib.image import imread

from bench import plot_results
from bench.bench_footprint import BEFORE, BEFORE_LABEL, LABELS, TARGETS, tables
from bench.results import machine, read, write

MEDIAN = {
    "default": {"rss_mb": 70.0, "start_s": 1.1, "cpu_s": 0.8, "torch": 0.0, "cuda_mb": 0.0},
    "torch": {"rss_mb": 260.0, "start_s": 2.9, "cpu_s": 2.2, "torch": 1.0, "cuda_mb": 0.0},
}


def test_rss_and_start_up_rows_with_targets_and_the_anchor(tmp_path: Path) -> None:
    _, _, (rss, start) = read(write("bench_footprint", tables(MEDIAN, 5), machine(), out=tmp_path))
    assert (rss.unit, start.unit) == ("MB", "s")
    assert rss.rows == [
        {"worker": LABELS["default"], "RSS": 70.0, "target": TARGETS["default"]["rss_mb"]},
        {"worker": LABELS["torch"], "RSS": 260.0, "target": TARGETS["torch"]["rss_mb"]},
        {"worker": BEFORE_LABEL, "RSS": BEFORE["rss_mb"], "target": None},
    ]
    assert [r["start-up (wall clock)"] for r in start.rows] == [1.1, 2.9, BEFORE["start_s"]]
    assert [r["CPU"] for r in start.rows] == [0.8, 2.2, None]  # the anchor's CPU seconds were not measured
    assert [r["target"] for r in start.rows] == [TARGETS["default"]["start_s"], None, None]


def test_the_larger_rss_draws_the_taller_bar(tmp_path: Path) -> None:
    write("bench_footprint", tables(MEDIAN, 5), machine(), out=tmp_path)
    assert plot_results.main([str(tmp_path)]) == 0
    image = imread(tmp_path / "bench_footprint-1.png")[:, :, :3]
    plot_area = image[:, : int(0.8 * image.shape[1])]  # the legend's patches are right of the axes
    near = np.abs(plot_area - np.array(colors.to_rgb("C0"))).max(axis=2) < 0.02  # the RSS bars
    heights = near.sum(axis=0)
    bars, start = [], None  # runs of columns holding the colour, left to right
    for column, height in enumerate([*heights, 0]):
        if height and start is None:
            start = column
        elif not height and start is not None:
            bars.append(int(heights[start:column].max()))
            start = None
    assert len(bars) == 3
    default, torch, before = bars
    assert default < torch < before  # 70 < 260 < 576 MB

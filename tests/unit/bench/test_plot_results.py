"""Bench results written as JSON, read back, and drawn by matplotlib: a bar per measured
value, at a height that orders as the values do; nothing drawn for a column not measured."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
from matplotlib import colors
from matplotlib.image import imread

from bench import plot_results
from bench.results import Table, machine, read, write


def columns_of(image: np.ndarray, colour: str) -> tuple[int, int]:
    """(topmost row, pixel count) of the pixels of ``colour``."""
    near = np.abs(image[:, :, :3] - np.array(colors.to_rgb(colour))).max(axis=2) < 0.02
    rows = np.flatnonzero(near.any(axis=1))
    return int(rows.min()) if rows.size else -1, int(near.sum())


def axes_of(image: np.ndarray) -> np.ndarray:
    """The plot without its legend (right of 82 % of the width), whose swatches sit high."""
    return image[:, : int(0.8 * image.shape[1])]


def test_results_round_trip_with_the_machine(tmp_path: Path) -> None:
    table = Table("t", "envs", ["cpu", "gpu"], rows=[{"envs": 8, "cpu": 10.0, "gpu": None}])
    path = write("bench_x", [table], machine(gpu=None), out=tmp_path)
    bench, where, tables = read(path)
    assert bench == "bench_x" and tables == [table]
    assert where["cores"] >= 1 and where["cpu"] and "date" in where
    assert json.loads(path.read_text())["tables"][0]["rows"][0]["gpu"] is None


def test_each_table_becomes_a_png_with_taller_bars_for_larger_values(tmp_path: Path) -> None:
    rows = [{"envs": 8, "ceiling": 100.0, "cpu": 25.0, "gpu": None}, {"envs": 64, "ceiling": 80.0, "cpu": 40.0}]
    write("bench_y", [Table("speed", "envs", ["ceiling", "cpu", "gpu"], rows=rows)], machine(), out=tmp_path)
    assert plot_results.main([str(tmp_path)]) == 0
    image = imread(tmp_path / "bench_y-1.png")
    ceiling_top, ceiling_pixels = columns_of(image, "C0")
    cpu_top, cpu_pixels = columns_of(image, "C1")
    assert 0 <= ceiling_top < cpu_top  # the ceiling's bar (100) reaches higher than the CPU's (40)
    assert ceiling_pixels > cpu_pixels > 0
    assert columns_of(image, "C2")[1] < 50  # gpu: not measured, no bar (the legend has no entry either)


def test_no_results_is_one_line_and_exit_1(tmp_path: Path, capsys) -> None:
    assert plot_results.main([str(tmp_path)]) == 1
    assert "no bench results" in capsys.readouterr().err


def test_a_log_axis_shows_small_rows_beside_large_ones(tmp_path: Path) -> None:
    """1 env and 1 024 envs: on a linear axis the small row's bar is a sliver, on a log one a bar."""
    rows = [{"envs": 1, "ours": 10.0}, {"envs": 1024, "ours": 1e6}]
    write("lin", [Table("t", "envs", ["ours"], rows=rows)], machine(), out=tmp_path)
    write("log", [Table("t", "envs", ["ours"], rows=rows, log_y=True)], machine(), out=tmp_path)
    assert plot_results.main([str(tmp_path)]) == 0
    _, linear = columns_of(imread(tmp_path / "lin-1.png")[:, :400], "C0")  # the left half: the 1-env bar
    _, logged = columns_of(imread(tmp_path / "log-1.png")[:, :400], "C0")
    assert logged > 20 * max(linear, 1)
    assert read(tmp_path / "log.json")[2][0].log_y and not read(tmp_path / "lin.json")[2][0].log_y


def bar_width(image: np.ndarray, colour: str) -> int:
    """Pixel columns of ``colour`` in the plot (the legend cut off)."""
    near = np.abs(axes_of(image)[:, :, :3] - np.array(colors.to_rgb(colour))).max(axis=2) < 0.02
    return int(near.any(axis=0).sum())


def test_a_row_measured_in_one_column_of_several_gets_a_bar_as_wide_as_its_group(tmp_path: Path) -> None:
    """Phases that each have their own mark (created; settled): no gaps for the others' columns."""
    dense = [{"what": "a", "seconds": 10.0}, {"what": "b", "seconds": 20.0}]
    sparse = [{"what": "a", "created": 10.0, "settled": None}, {"what": "b", "settled": 20.0}]
    write("dense", [Table("t", "what", ["seconds"], "s", dense)], machine(), out=tmp_path)
    write("sparse", [Table("t", "what", ["created", "settled"], "s", sparse)], machine(), out=tmp_path)
    assert plot_results.main([str(tmp_path)]) == 0
    dense_image, sparse_image = imread(tmp_path / "dense-1.png"), imread(tmp_path / "sparse-1.png")
    assert bar_width(dense_image, "C0") > 100  # the dense table's two bars
    assert abs(bar_width(sparse_image, "C0") + bar_width(sparse_image, "C1") - bar_width(dense_image, "C0")) <= 4


def test_long_row_labels_sit_side_by_side() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    rows = [{"path": f"raw redis-py path number {i}, with a long name", "MB/s": 100.0 * (i + 1)} for i in range(5)]
    figure = plot_results.bar_chart(Table("paths", "path", ["MB/s"], rows=rows, unit="MB/s"), machine())
    FigureCanvasAgg(figure).draw()
    [ax] = figure.axes
    boxes = [label.get_window_extent() for label in ax.get_xticklabels()]
    assert len(boxes) == 5
    assert all(left.x1 < right.x0 for left, right in itertools.pairwise(boxes))  # as matplotlib laid them out

"""bench.autoscale_results: bench_autoscale's JSON lines (as its --json writes them) become
medians per fleet, through a JSON round trip, and bars; a bad line is one message naming it."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest
from matplotlib.image import imread

from bench import autoscale_results, plot_results
from bench.bench_autoscale import Result, Setting
from bench.results import read
from tests.unit.bench.test_plot_results import axes_of, columns_of

FIXED, SCALED = Setting(4), Setting(None, 0.1, 4, 1)


def line(setting: Setting, repeat: int, worker_seconds: float, starved: float) -> str:
    result = Result(worker_seconds, starved, 1000, [5.0, 6.0, 7.0, 1.0], 4, [starved, 0.0, math.nan, 2 * starved])
    return json.dumps({"setting": asdict(setting), "repeat": repeat, **asdict(result)})  # as bench_autoscale does


def runs_file(tmp_path: Path) -> Path:
    runs = [line(SCALED, 0, 300, 0.20), line(FIXED, 0, 480, 0.05), line(FIXED, 1, 470, 0.03)]
    runs += [line(SCALED, 1, 320, 0.10), line(FIXED, 2, 490, 0.04), line(SCALED, 2, 310, 0.15)]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(runs) + "\n")
    return path


def test_medians_per_fleet_round_trip(tmp_path: Path) -> None:
    assert autoscale_results.main([str(runs_file(tmp_path)), "--out", str(tmp_path)]) == 0
    bench, where, (cost, starved) = read(tmp_path / "bench_autoscale.json")
    assert bench == "bench_autoscale" and where["cores"] >= 1 and "load_average_1m" in where
    fixed, scaled = cost.rows
    assert (fixed["fleet"], scaled["fleet"]) == (FIXED.label, SCALED.label)  # the sweep's order, not the file's
    assert (fixed["runs"], fixed["worker-seconds"], scaled["worker-seconds"]) == (3, 480.0, 310.0)
    assert starved.series == ["over the run", "fast", "slow", "back"]  # "gone": the learner reads nothing
    assert (scaled["over the run"], scaled["fast"], scaled["slow"], scaled["back"]) == (15.0, 15.0, 0.0, 30.0)
    assert "gone" not in scaled and fixed["changes"] == 4


def test_bars_order_as_the_medians(tmp_path: Path) -> None:
    autoscale_results.main([str(runs_file(tmp_path)), "--out", str(tmp_path)])
    assert plot_results.main([str(tmp_path)]) == 0
    image = axes_of(imread(tmp_path / "bench_autoscale-1.png"))
    middle = image.shape[1] // 2 + 30  # the axes start at 12 % of the width
    fixed_top = columns_of(image[:, :middle], "C0")[0]  # left group: the fixed fleet's 480
    scaled_top = columns_of(image[:, middle:], "C0")[0]  # right group: the autoscaled 310
    assert 0 <= fixed_top < scaled_top


def test_a_line_that_is_not_a_run_is_one_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.jsonl"
    path.write_text(line(FIXED, 0, 480, 0.05) + '\n{"repeat": 0}\n')
    assert autoscale_results.main([str(path), "--out", str(tmp_path)]) == 1
    assert "runs.jsonl:2: not a bench_autoscale run" in capsys.readouterr().err
    assert not (tmp_path / "bench_autoscale.json").exists()

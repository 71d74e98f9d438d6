"""bench_fleet's JSON: medians of the repeats per row, the RLlib anchor marked as such, the
weights row with its fragments, and each table drawn by plot_results."""

from __future__ import annotations

from pathlib import Path

from bench import plot_results
from bench.bench_fleet import KILL, RLLIB_ANCHOR_64, RLLIB_ROW, STARTUP, WEIGHTS, tables
from bench.results import machine, read, write


def test_rows_are_medians_and_the_anchor_is_its_own_row(tmp_path: Path) -> None:
    rates = {"fleet, 1 worker": [9_000.0, 11_000.0, 10_000.0], "fleet, 2 workers": [19_000.0, 18_000.0, 20_000.0]}
    latencies = {STARTUP: [1.5, 1.2, 1.4], KILL: [1.6, 1.9, 1.7], WEIGHTS: [0.05, 0.02, 0.03]}
    written = write("bench_fleet", tables(rates, latencies, [0.4, 0.2, 0.3], 3), machine(), out=tmp_path)
    bench, where, (delivered, timing) = read(written)
    assert bench == "bench_fleet" and where["cores"] >= 1
    assert [(r["delivered to the learner"], r["env steps/s"]) for r in delivered.rows] == [
        ("fleet, 1 worker", 10_000.0),
        ("fleet, 2 workers", 19_000.0),
        (RLLIB_ROW, RLLIB_ANCHOR_64),
    ]
    assert "anchor" in RLLIB_ROW and timing.unit == "s"
    assert delivered.log_y and timing.log_y  # rows ~30x apart: a linear axis shows the small ones as slivers
    assert [(r["event"], r["seconds"]) for r in timing.rows] == [(STARTUP, 1.4), (KILL, 1.7), (WEIGHTS, 0.03)]
    assert timing.rows[2]["fragments"] == 0.3 and "fragments" not in timing.rows[0]
    assert plot_results.main([str(tmp_path)]) == 0
    assert (tmp_path / "bench_fleet-1.png").stat().st_size > 0 and (tmp_path / "bench_fleet-2.png").stat().st_size > 0

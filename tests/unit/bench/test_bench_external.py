"""bench_external's JSON: per client count, each inference mode's actions/s beside the
in-process ceiling, and its p50/p99 latency, each under its own column."""

from __future__ import annotations

from pathlib import Path

from bench import plot_results
from bench.bench_external import CEILING, tables
from bench.results import machine, read, write


def test_rates_and_latencies_per_client_count(tmp_path: Path) -> None:
    measured = {
        ("remote", 1): (1_249.0, 0.28, 2.25, 1.0),
        ("remote", 8): (1_883.0, 1.23, 22.27, 1.3),
        ("local", 1): (4_956.0, 0.02, 0.74, float("nan")),
        ("local", 8): (2_420.0, 0.02, 11.39, float("nan")),
    }
    path = write("bench_external", tables(measured, {1: 9_824.0, 8: 75_125.0}, 3.0), machine(), out=tmp_path)
    _, _, (rate, latency) = read(path)
    assert rate.series == ["remote", "local", CEILING] and latency.unit == "ms"
    assert rate.rows == [
        {"clients": 1, "remote": 1_249.0, "local": 4_956.0, CEILING: 9_824.0},
        {"clients": 8, "remote": 1_883.0, "local": 2_420.0, CEILING: 75_125.0},
    ]
    assert latency.rows[1] == {"clients": 8, "remote p50": 1.23, "remote p99": 22.27, "local p50": 0.02,
                               "local p99": 11.39}  # fmt: skip
    assert plot_results.main([str(tmp_path)]) == 0 and (tmp_path / "bench_external-2.png").exists()

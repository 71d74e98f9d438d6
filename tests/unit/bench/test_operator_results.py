"""bench.operator_results: bench_operator's rows through a JSON round trip keep every figure
of the text table, a figure not measured (a failed size) is null and draws no bar, and the
bars stand as tall as their seconds."""

from __future__ import annotations

from pathlib import Path

from matplotlib.image import imread

from bench import apiserver_metrics, operator_results, plot_results
from bench.bench_operator import Row
from bench.results import machine, read, write
from tests.unit.bench.test_plot_results import axes_of, columns_of


def rows() -> list[Row]:
    start = Row("1000 workers: apply -> Ready", pods=1000, operator_cpu_s=5.0, bench_cpu_s=2.0, operator_rss_mb=134)
    start.control_plane_cpu_s = 12.0
    start.seconds = {"created": 10.0, "running": 30.0, "ready": 40.0, "wall": 40.0}
    start.server = apiserver_metrics.Scrape(
        requests=apiserver_metrics.Counter({("POST", "pods"): 1000, ("PATCH", "pods/status"): 1000})
    )
    down = Row("1000 -> 100 workers (scale down)", pods=1000, operator_cpu_s=1.0, bench_cpu_s=0.5)
    down.control_plane_cpu_s, down.operator_rss_mb = 3.0, 140
    down.seconds = {"settled": 20.0, "wall": 20.0}
    failed = Row("3000 workers: apply -> Ready", outcome="FAILED: TimeoutError: created: 5 pods", pods=3000)
    return [start, down, failed]


def test_rows_round_trip_with_every_figure_of_the_text_table(tmp_path: Path) -> None:
    path = write("bench_operator", operator_results.tables(rows()), machine(), out=tmp_path)
    _, _, (seconds, cpu) = read(path)
    assert seconds.series == ["created", "running", "ready", "settled"]  # the marks, in the order first seen
    assert cpu.series == list(operator_results.CPU)
    start, down, failed = seconds.rows
    assert (start["created"], start["ready"], down["settled"], down.get("ready")) == (10.0, 40.0, 20.0, None)
    assert start["operator CPU ms per pod"] == 5.0  # 5 CPU s over 1 000 pods
    assert (start["API requests"], start["API requests per s"]) == (2000, 50.0)  # 2 000 in 40 s
    assert (start["operator peak RSS MB"], start["kube-apiserver + etcd"]) == (134, 12.0)
    assert failed["outcome"].startswith("FAILED") and failed["operator"] is None  # NaN -> null, not 0
    assert failed["API requests per s"] is None and failed["pods"] == 3000


def test_bars_as_tall_as_the_seconds_and_none_for_a_failed_size(tmp_path: Path) -> None:
    write("bench_operator", operator_results.tables(rows()), machine(), out=tmp_path)
    assert plot_results.main([str(tmp_path)]) == 0
    image = axes_of(imread(tmp_path / "bench_operator-1.png"))
    created_top, created_pixels = columns_of(image, "C0")  # 10 s
    ready_top, ready_pixels = columns_of(image, "C2")  # 40 s
    assert 0 <= ready_top < created_top and ready_pixels > created_pixels > 0
    cpu = axes_of(imread(tmp_path / "bench_operator-2.png"))
    assert columns_of(cpu, "C2")[0] < columns_of(cpu, "C0")[0]  # apiserver+etcd's 12 s above the operator's 5

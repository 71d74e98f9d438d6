"""bench.operator_table: the operator bench's rows as a Markdown table."""

from __future__ import annotations

from bench import apiserver_metrics, bench_operator
from bench.operator_table import Row, render


def test_the_table_states_cpu_per_pod_and_the_bench_share() -> None:
    row = Row("1000 workers: apply -> Ready", pods=1000, operator_cpu_s=5.0, bench_cpu_s=2.0, operator_rss_mb=150)
    row.seconds = {"created": 10.0, "ready": 20.0, "wall": 20.0}
    row.server = apiserver_metrics.Scrape(requests=apiserver_metrics.Counter({("POST", "pods"): 1000}))
    line = render([row], cores=2)[-1]
    assert "5.0 (5.0)" in line  # 5 ms a pod
    assert "2.0 (5 % of 2 cores)" in line  # 2 CPU s in 20 s on 2 cores
    assert "(50/s)" in line  # 1000 requests in 20 s
    assert bench_operator.BIG == 10_000


def test_pods_created_a_second_are_also_a_share_of_the_bare_clients_and_refusals_are_shown() -> None:
    row = Row("1000 workers: apply -> Ready", pods=1000, ceiling=125.0)
    row.seconds = {"created": 10.0, "wall": 20.0}
    row.server = apiserver_metrics.Scrape(
        requests=apiserver_metrics.Counter({("POST", "pods"): 1003}),
        refusals=apiserver_metrics.Counter({("POST", "pods", "409"): 3}),
        seconds=apiserver_metrics.Counter({("POST", "pods"): 100.3}),
        timed=apiserver_metrics.Counter({("POST", "pods"): 1003}),
    )
    line = render([row], cores=2)[-1]
    assert "| 100 (80 % of the bare client's 125) |" in line
    assert "| POST pods 409 3 | 100 |" in line  # three duplicate creates; 100 ms a create at the server
    bare = Row("1000 pods, bare client", pods=1000)
    bare.seconds = {"wall": 5.0}
    assert "| nan (nan) |" in render([bare], cores=2)[-1]  # no operator, no made-up numbers

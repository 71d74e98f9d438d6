"""``bench_operator``'s rows as result tables (:mod:`bench.results`), so that ``make bench``
writes ``out/bench/bench_operator.json`` and :mod:`bench.plot_results` draws it: the wall
seconds of each phase's marks (created, Running, Ready, settled, ...) and the CPU seconds of
the operator, of the bench process (watch + simulated kubelet) and of kube-apiserver + etcd.
Each row also keeps what the text table says and the plots leave out (outcome, operator CPU
per pod, peak RSS, API requests and their rate); a figure not measured is ``null``."""

from __future__ import annotations

import math
from typing import Any

from bench.results import Table, Value

CPU = {
    "operator": "operator_cpu_s",
    "bench process (watch + simulated kubelet)": "bench_cpu_s",
    "kube-apiserver + etcd": "control_plane_cpu_s",
}


def measured(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 2)


def row_values(row: Any) -> dict[str, Value]:
    """One bench_operator ``Row`` as a table row: every figure, NaN as None."""
    wall = row.seconds.get("wall", math.nan)
    requests = sum(row.requests.values())
    values: dict[str, Value] = {"what": row.what, "outcome": row.outcome, "pods": row.pods}
    values.update({mark: round(seconds, 2) for mark, seconds in row.seconds.items()})
    values.update({name: measured(getattr(row, attr)) for name, attr in CPU.items()})
    per_pod = 1000 * row.operator_cpu_s / row.pods if row.pods else math.nan
    values["operator CPU ms per pod"] = measured(per_pod)
    values["operator peak RSS MB"] = measured(row.operator_rss_mb)
    values["API requests"] = requests
    values["API requests per s"] = measured(requests / wall if wall > 0 else math.nan)
    return values


def tables(rows: list[Any]) -> list[Table]:
    """Two tables over the same rows: wall seconds by mark, then CPU seconds by process."""
    marks: list[str] = []
    for row in rows:
        marks += [mark for mark in row.seconds if mark != "wall" and mark not in marks]
    values = [row_values(row) for row in rows]
    return [
        Table(
            "The operator on the local control plane: seconds from the apply (or the patch) to each mark",
            "what",
            marks,
            unit="seconds",
            rows=values,
        ),
        Table("CPU seconds spent in each phase, by process", "what", list(CPU), unit="CPU seconds", rows=values),
    ]

"""``python -m bench.autoscale_results RUNS.jsonl [--out DIR]``: the JSON lines that
``bench_autoscale --json`` appends (one line per run) as result tables (:mod:`bench.results`),
``DIR/bench_autoscale.json`` (default ``out/bench``), for :mod:`bench.plot_results`: per
fleet, the median worker-seconds, and the learner's median starvation over the run and in
each phase it reads. Run it right after the bench (``make bench-autoscale`` does): the
machine's load in the JSON is the load when it is written."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from bench.bench_autoscale import PHASES, Setting
from bench.results import OUT, Table, Value, machine, write


def order(setting: Setting) -> tuple[bool, int, int, int, float, int, bool]:
    """The sweep's order: fixed fleets first, largest first; then autoscaled by start, minReplicas,
    headroom, window; forked workers before new interpreters."""
    return (
        setting.fixed is None,
        -(setting.fixed or 0),
        setting.start,
        setting.min_replicas,
        setting.headroom,
        setting.window_s,
        setting.worker_start != "fork",
    )


def read_runs(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Runs by their fleet's label, fleets in the sweep's order (runs end in any order)."""
    runs: dict[Setting, list[dict[str, Any]]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            run = json.loads(line)
            setting = Setting(**run["setting"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not a bench_autoscale run ({error})") from None
        runs.setdefault(setting, []).append(run)
    return {setting.label: runs[setting] for setting in sorted(runs, key=order)}


def median(runs: list[dict[str, Any]], key: str, index: int | None = None) -> float | None:
    values = [float(run[key] if index is None else run[key][index]) for run in runs]
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else None


def percent(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 1)


def row(label: str, runs: list[dict[str, Any]]) -> dict[str, Value]:
    values: dict[str, Value] = {"fleet": label, "runs": len(runs)}
    worker_seconds = median(runs, "worker_seconds")
    values["worker-seconds"] = None if worker_seconds is None else round(worker_seconds, 1)
    values["over the run"] = percent(median(runs, "starved"))
    for index, (phase, appetite) in enumerate(PHASES):
        if appetite:
            values[phase] = percent(median(runs, "phase_starved", index))
    values["rows to the learner"] = median(runs, "rows")
    values["changes"] = median(runs, "changes")
    return values


def tables(runs: dict[str, list[dict[str, Any]]]) -> list[Table]:
    rows = [row(label, fleet_runs) for label, fleet_runs in runs.items()]
    repeats = max((len(r) for r in runs.values()), default=0)
    phases = [f"{phase}" for phase, appetite in PHASES if appetite]
    return [
        Table(f"Worker-seconds spent, median of {repeats} run(s)", "fleet", ["worker-seconds"], "worker-seconds", rows),
        Table(
            "The learner starved: share of its reading time waiting for rows, over the run and in each phase "
            f"({', '.join(f'{p} {a:.0f} rows/s' for p, a in PHASES if a)})",
            "fleet",
            ["over the run", *phases],
            "% of the time starved",
            rows,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="the file bench_autoscale --json wrote")
    parser.add_argument("--out", type=Path, default=OUT, help="where bench_autoscale.json goes")
    args = parser.parse_args(argv)
    try:
        runs = read_runs(args.runs)
    except (OSError, ValueError) as error:
        print(f"autoscale_results: {error}", file=sys.stderr)
        return 1
    if not runs:
        print(f"autoscale_results: no runs in {args.runs}", file=sys.stderr)
        return 1
    write("bench_autoscale", tables(runs), machine(), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bench results as JSON, ``out/bench/<bench>.json``: each table's rows (median env steps/s
and the like) with the machine they were measured on, so ``python -m bench.plot_results``
draws them with matplotlib, and a run can be compared with another without parsing text."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OUT = Path("out/bench")
Value = float | int | str | None


@dataclass
class Table:
    title: str
    x: str  # the column the rows are told apart by (envs, cores x envs, ...)
    series: list[str]  # the numeric columns to draw, one bar each per row
    unit: str = "env steps/s"
    rows: list[dict[str, Value]] = field(default_factory=list)
    log_y: bool = False  # rows of very different sizes (1 env and 1 024): a log axis shows them all


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(**extra: Value) -> dict[str, Value]:
    """What the figures depend on: the CPU, how many cores this process may use, how busy the
    machine was (1-minute load average) and when; ``extra``: the bench's own (a GPU's name)."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "load_average_1m": round(os.getloadavg()[0], 1),
        "python": platform.python_version(),
        **extra,
    }


def write(bench: str, tables: list[Table], where: dict[str, Value], out: Path = OUT) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{bench}.json"
    path.write_text(json.dumps({"bench": bench, "machine": where, "tables": [asdict(t) for t in tables]}, indent=2))
    print(f"results: {path}")
    return path


def read(path: Path) -> tuple[str, dict[str, Any], list[Table]]:
    data = json.loads(path.read_text())
    return data["bench"], data["machine"], [Table(**t) for t in data["tables"]]

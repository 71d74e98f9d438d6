"""``make soak``: a local fleet and a learner run steadily while we watch their memory.

It starts ``rolloutfleet run MANIFEST -- python -m bench.soak_learner MANIFEST`` (by
default ``examples/cartpole.yaml``: 2 workers x 8 CartPoles, ``block`` backpressure; the
learner trains PPO and publishes new weights after every update) and, every
``--interval`` seconds, reads the resident memory of every process of the fleet from
``/proc``: the supervisor (the ``rolloutfleet run`` process), each worker, the learner and
the embedded redis-server, each with its own children counted in. The processes are
found as the supervisor's children, told apart by their command lines (a worker's index
comes from its ``ROLLOUTFLEET_WORKER_INDEX``); a worker whose pid changes was restarted.

The first ``--warmup`` of the run (default 10 %, at least a minute, at most half the run) is
start-up: torch, the env, the allocators and PPO's first updates settle. Growth is judged after it, per process: the median of the samples in
a window just after the warm-up against the median of the samples in the last window of
the run (each window 5 % of the run, at least 3 samples), plus a least-squares slope in
MB/h over everything after the warm-up. It prints a table and one line::

    soak: 1h, worker RSS 566.1 -> 567.0 MB (+0.2 %), learner ..., redis ...

and writes ``samples.csv`` (one row per process per sample), ``summary.json`` and
``rss.png`` (RSS over time; growth against the baseline below) to ``--out``. It exits 1
when a worker's RSS grew more than ``--max-growth`` percent after the warm-up (the goal:
under 5 % in an hour; RLlib's env runners leak until OOM, ray #21718 and #59394), when a
worker was restarted (its memory starts over, so growth cannot be judged), or when the
learner consumed nothing.

Usage: ``python -m bench.soak [--duration 1h] [--interval 5] [--out out/soak]``;
``python -m bench.soak --from-csv out/soak/samples.csv`` prints the table and redraws
the plot from an earlier run's samples.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.plots import Panel, Series, line_chart_png
from bench.proc_memory import fleet_memory
from bench.soak_analysis import (
    Growth,
    Sample,
    analyze,
    format_duration,
    kind_of,
    parse_duration,
    summary_line,
    table,
    verdict,
)

REPO = Path(__file__).resolve().parent.parent
CSV_FIELDS = ("elapsed_s", "process", "pid", "rss_kb", "rss_anon_kb", "processes")


# -- files --------------------------------------------------------------------------------


def read_csv(path: Path) -> list[Sample]:
    with path.open() as f:
        return [
            Sample(
                float(r["elapsed_s"]),
                r["process"],
                int(r["pid"]),
                int(r["rss_kb"]),
                int(r["rss_anon_kb"]),
                int(r["processes"]),
            )
            for r in csv.DictReader(f)
        ]


def plot(
    samples: Sequence[Sample], growths: Mapping[str, Growth], warmup_s: float, max_growth_pct: float, title: str
) -> bytes:
    by_process: dict[str, list[Sample]] = {}
    for sample in samples:
        by_process.setdefault(sample.process, []).append(sample)
    absolute = [
        Series(name, [(s.elapsed_s / 60, s.rss_kb / 1024) for s in rows]) for name, rows in sorted(by_process.items())
    ]
    relative = [  # after the warm-up only: start-up would dwarf the growth this panel is about
        Series(
            name,
            [
                (s.elapsed_s / 60, (s.rss_kb / 1024 / growths[name].start_mb - 1) * 100)
                for s in rows
                if s.elapsed_s >= warmup_s
            ],
        )
        for name, rows in sorted(by_process.items())
        if kind_of(name) == "worker" and name in growths
    ]
    return line_chart_png(
        [
            Panel(f"{title}: RSS of every process (MB)", absolute),
            Panel(
                f"Worker RSS vs its post-warm-up baseline (%), goal < {max_growth_pct:g} %", relative, max_growth_pct
            ),
        ],
        x_label="minutes",
        shade_until=warmup_s / 60,
    )


@dataclass
class SoakResult:
    duration_s: float
    warmup_s: float
    growths: dict[str, Growth]
    learner: dict[str, object] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    summary: str = ""


def report(
    samples: Sequence[Sample],
    duration_s: float,
    warmup_s: float,
    max_growth_pct: float,
    out: Path,
    learner: dict[str, object],
) -> SoakResult:
    growths = analyze(samples, warmup_s)
    batches = learner.get("delivered") if learner else None
    result = SoakResult(
        duration_s=duration_s,
        warmup_s=warmup_s,
        growths=growths,
        learner=learner,
        restarts={g.process: g.pids - 1 for g in growths.values() if kind_of(g.process) == "worker"},
        problems=verdict(growths, max_growth_pct, batches if isinstance(batches, int) else None),
        summary=summary_line(duration_s, growths),
    )
    (out / "rss.png").write_bytes(
        plot(samples, growths, warmup_s, max_growth_pct, f"soak {format_duration(duration_s)}")
    )
    (out / "summary.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    print(f"\nafter a warm-up of {format_duration(warmup_s)}; windows of 5 % of the run; MB = MiB of VmRSS")
    print(table(growths))
    if learner:
        print(
            f"learner: {learner.get('delivered', 0):,} batches ({learner.get('env_steps', 0):,} env steps) consumed, "
            f"{learner.get('updates', 0):,} PPO updates, weights v{learner.get('weights_seq_no', 0)}"
        )
    print(f"samples: {out / 'samples.csv'}, plot: {out / 'rss.png'}, summary: {out / 'summary.json'}")
    for problem in result.problems:
        print(f"FAIL: {problem}")
    print(result.summary)
    return result


# -- the run ------------------------------------------------------------------------------


def read_learner_stats(path: Path) -> dict[str, object]:
    try:
        stats: dict[str, object] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    consumer = stats.pop("consumer", {})
    if isinstance(consumer, dict):
        stats.update(consumer)  # delivered, acked, duplicates, stale, ...
    return stats


def progress_line(elapsed: float, duration_s: float, samples: Sequence[Sample], learner: Mapping[str, object]) -> str:
    latest = {s.process: s.rss_kb / 1024 for s in samples if s.elapsed_s == samples[-1].elapsed_s} if samples else {}
    return (
        f"soak: {format_duration(elapsed)} / {format_duration(duration_s)}  "
        + "  ".join(f"{process} {mb:.0f} MB" for process, mb in latest.items())
        + f"  learner {learner.get('delivered', 0):,} batches, weights v{learner.get('weights_seq_no', 0)}"
    )


def run_soak(
    duration_s: float,
    out: Path,
    manifest: Path = REPO / "examples" / "cartpole.yaml",
    interval_s: float = 5.0,
    warmup_fraction: float = 0.1,
    max_growth_pct: float = 5.0,
) -> SoakResult:
    """Run the fleet for ``duration_s``, sampling every ``interval_s``; Ctrl-C ends it early, with a report."""
    out.mkdir(parents=True, exist_ok=True)
    stats_path, log_path = out / "learner.json", out / "fleet.log"
    stats_path.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--no-status", "--",
        sys.executable, "-m", "bench.soak_learner", str(manifest), "--stats", str(stats_path),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    samples: list[Sample] = []
    print(f"soak: {format_duration(duration_s)} of {manifest.name}, a sample every {interval_s:g} s; log {log_path}")
    with log_path.open("wb") as log, (out / "samples.csv").open("w", newline="") as csv_file:
        writer = csv.writer(csv_file)
        writer.writerow(CSV_FIELDS)
        fleet = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        started, next_progress = time.monotonic(), 60.0
        try:
            while (elapsed := time.monotonic() - started) < duration_s:
                if fleet.poll() is not None:
                    raise SoakError(f"the fleet exited with {fleet.returncode} after {elapsed:.0f} s; see {log_path}")
                for process, memory in sorted(fleet_memory(fleet.pid).items()):
                    sample = Sample(
                        round(elapsed, 1), process, memory.pid, memory.rss_kb, memory.rss_anon_kb, memory.processes
                    )
                    samples.append(sample)
                    writer.writerow([getattr(sample, f) for f in CSV_FIELDS])
                csv_file.flush()  # an interrupted run keeps its samples
                if elapsed >= next_progress:
                    next_progress += max(60.0, duration_s / 20)
                    print(progress_line(elapsed, duration_s, samples, read_learner_stats(stats_path)), flush=True)
                time.sleep(max(0.0, interval_s - (time.monotonic() - started - elapsed)))
        except KeyboardInterrupt:
            print(f"soak: interrupted after {format_duration(elapsed)}; reporting on the samples so far")
            duration_s = elapsed
        finally:
            if fleet.poll() is None:
                fleet.send_signal(signal.SIGTERM)  # the graceful stop: workers, learner, redis-server
                try:
                    fleet.wait(60)
                except subprocess.TimeoutExpired:
                    fleet.kill()
                    fleet.wait()
    return report(
        samples, duration_s, warmup_of(duration_s, warmup_fraction), max_growth_pct, out, read_learner_stats(stats_path)
    )


def warmup_of(duration_s: float, fraction: float) -> float:
    """``fraction`` of the run, but at least a minute (half of a run shorter than two): start-up on
    a busy machine (torch, the env, PPO's first updates) takes tens of seconds by itself."""
    return max(fraction * duration_s, min(60.0, duration_s / 2))


class SoakError(RuntimeError):
    """The fleet stopped before the soak's end."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=parse_duration, default=3600.0, help="seconds, or 90s, 10m, 1h (default 1h)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument(
        "--warmup", type=float, default=0.1, help="fraction of the run before growth is judged (at least 1 min)"
    )
    parser.add_argument("--max-growth", type=float, default=5.0, help="percent of worker RSS growth that fails")
    parser.add_argument("--manifest", type=Path, default=REPO / "examples" / "cartpole.yaml")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "soak")
    parser.add_argument("--from-csv", type=Path, help="report on an earlier run's samples.csv instead of running")
    args = parser.parse_args(argv)
    if args.from_csv is not None:
        samples = read_csv(args.from_csv)
        out = args.from_csv.parent
        try:  # the run's own duration; the last sample comes up to one interval before its end
            duration = float(json.loads((out / "summary.json").read_text())["duration_s"])
        except (OSError, ValueError, KeyError):
            duration = max(s.elapsed_s for s in samples)
        result = report(
            samples,
            duration,
            warmup_of(duration, args.warmup),
            args.max_growth,
            out,
            read_learner_stats(out / "learner.json"),
        )
    else:
        try:
            result = run_soak(args.duration, args.out, args.manifest, args.interval, args.warmup, args.max_growth)
        except SoakError as error:
            print(f"soak: FAIL: {error}", file=sys.stderr)
            return 1
    return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The soak's arithmetic, pure: growth after the warm-up, the table, the summary line, the verdict."""

from __future__ import annotations

import argparse
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def parse_duration(text: str) -> float:
    """``"3600"``, ``"120s"``, ``"90m"``, ``"1h"``, ``"1h30m"`` -> seconds."""
    text = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"duration: expected seconds or e.g. 90s, 10m, 1h, 1h30m (got {text!r})")
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs else "")
    return text or "0s"


@dataclass(frozen=True)
class Sample:
    elapsed_s: float
    process: str
    pid: int
    rss_kb: int
    rss_anon_kb: int
    processes: int


@dataclass(frozen=True)
class Growth:
    process: str
    start_mb: float  # median RSS of the window after the warm-up
    end_mb: float  # median RSS of the last window
    growth_pct: float
    peak_mb: float  # after the warm-up
    slope_mb_per_h: float  # least squares, after the warm-up
    anon_start_mb: float
    anon_end_mb: float
    samples: int
    pids: int  # more than one: the process was restarted


def kind_of(process: str) -> str:
    return "worker" if process.startswith("worker-") else process


def analyze(samples: Sequence[Sample], warmup_s: float, window_fraction: float = 0.05) -> dict[str, Growth]:
    """Growth per process after ``warmup_s``; processes with fewer than 2 samples after it are left out."""
    by_process: dict[str, list[Sample]] = {}
    for sample in samples:
        by_process.setdefault(sample.process, []).append(sample)
    results = {}
    for process, rows in sorted(by_process.items()):
        rows = sorted(rows, key=lambda s: s.elapsed_s)
        after = [s for s in rows if s.elapsed_s >= warmup_s]
        if len(after) < 2:
            continue
        span = after[-1].elapsed_s - after[0].elapsed_s
        # Each window is a fraction of the run, which ends about one interval after its last sample.
        window_s = window_fraction * (after[-1].elapsed_s + (after[1].elapsed_s - after[0].elapsed_s))
        first = [s for s in after if s.elapsed_s <= after[0].elapsed_s + window_s]
        last = [s for s in after if s.elapsed_s >= after[-1].elapsed_s - window_s]
        first, last = (first if len(first) >= 3 else after[:3]), (last if len(last) >= 3 else after[-3:])
        start = statistics.median(s.rss_kb for s in first) / 1024
        end = statistics.median(s.rss_kb for s in last) / 1024
        slope = 0.0
        if span > 0:
            ts = [s.elapsed_s for s in after]
            mean_t = statistics.fmean(ts)
            mean_r = statistics.fmean(s.rss_kb for s in after)
            var = sum((t - mean_t) ** 2 for t in ts)
            cov = sum((t - mean_t) * (s.rss_kb - mean_r) for t, s in zip(ts, after, strict=True))
            slope = cov / var / 1024 * 3600 if var else 0.0
        results[process] = Growth(
            process=process,
            start_mb=start,
            end_mb=end,
            growth_pct=(end / start - 1) * 100 if start else 0.0,
            peak_mb=max(s.rss_kb for s in after) / 1024,
            slope_mb_per_h=slope,
            anon_start_mb=statistics.median(s.rss_anon_kb for s in first) / 1024,
            anon_end_mb=statistics.median(s.rss_anon_kb for s in last) / 1024,
            samples=len(after),
            pids=len({s.pid for s in rows}),
        )
    return results


def kind_line(growths: Mapping[str, Growth], kind: str, label: str) -> str:
    members = [g for g in growths.values() if kind_of(g.process) == kind]
    if not members:
        return f"{label} not sampled"
    start = statistics.fmean(g.start_mb for g in members)
    end = statistics.fmean(g.end_mb for g in members)
    text = f"{label} RSS {start:.1f} -> {end:.1f} MB ({(end / start - 1) * 100:+.1f} %"
    if len(members) > 1:
        text += f", worst {max(g.growth_pct for g in members):+.1f} %"
    return text + ")"


def summary_line(duration_s: float, growths: Mapping[str, Growth]) -> str:
    parts = [kind_line(growths, kind, label) for kind, label in [("worker", "worker"), ("learner", "learner")]]
    parts.append(kind_line(growths, "redis-server", "redis"))
    parts.append(kind_line(growths, "supervisor", "supervisor"))
    return f"soak: {format_duration(duration_s)}, " + ", ".join(parts)


def table(growths: Mapping[str, Growth]) -> str:
    header = (
        f"{'process':<14}{'start MB':>10}{'end MB':>10}{'growth':>9}{'peak MB':>10}"
        f"{'MB/h':>8}{'anon start':>12}{'anon end':>10}{'samples':>9}{'pids':>6}"
    )
    lines = [header, "-" * len(header)]
    for g in growths.values():
        lines.append(
            f"{g.process:<14}{g.start_mb:>10.1f}{g.end_mb:>10.1f}{g.growth_pct:>+8.1f}%{g.peak_mb:>10.1f}"
            f"{g.slope_mb_per_h:>+8.1f}{g.anon_start_mb:>12.1f}{g.anon_end_mb:>10.1f}{g.samples:>9}{g.pids:>6}"
        )
    return "\n".join(lines)


def verdict(growths: Mapping[str, Growth], max_growth_pct: float, batches: int | None) -> list[str]:
    """Why the soak fails; empty when it passes."""
    problems = []
    workers = [g for g in growths.values() if kind_of(g.process) == "worker"]
    if not workers:
        problems.append("no worker was sampled after the warm-up")
    for g in workers:
        if g.pids > 1:
            problems.append(f"{g.process} was restarted ({g.pids} pids): its growth cannot be judged")
        elif g.growth_pct > max_growth_pct:
            problems.append(
                f"{g.process} RSS grew {g.growth_pct:+.1f} % after the warm-up (limit {max_growth_pct:g} %)"
            )
    if batches is not None and batches == 0:
        problems.append("the learner consumed no batch")
    return problems

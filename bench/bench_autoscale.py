"""Fixed fleets against autoscaled ones (``spec.autoscaling``), at matched learner starvation:
real worker processes of a paced env (a fixed wall time per step, no CPU, so a worker's
speed hardly depends on how many share the machine), a real redis-server, a learner in
this process whose appetite steps: fast, slow, gone, fast again.

Per configuration (fixed sizes; autoscaled with each starting size x ``headroom`` x
``windowSeconds`` x ``minReplicas`` x worker start, forked from the warm server or exec'd;
fixed fleets fork theirs): worker-seconds (workers alive, summed over the run), the
learner's starvation (share of its time ``get()`` waited for rows, from its own
``BatchConsumer`` meter; over the run and per phase), rows it got, the time from each
appetite step to the fleet's last change in it, changes; medians over ``--repeats`` (0:
none); then the cheapest autoscaled setting starved no more than the peak-sized fixed fleet
(or the closest one). ``--startup-repeats``: first, a worker's start to its first batch,
forked and exec'd. The load average is printed before and after.

Usage: ``python -m bench.bench_autoscale [--phase-seconds 60] [--repeats 1] [--headroom 0.1,0.3]
[--window-seconds 4,8] [--start 1,4] [--min-replicas 0,1] [--worker-start fork,exec] [--fixed 4,3]
[--parallel 1] [--startup-repeats 5] [--json out.jsonl]`` (``make bench-autoscale``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from rolloutfleet import RolloutJob
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.local_autoscaler import LocalAutoscaler
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.redis.keys import job_keys

STEP_S = 0.005  # one env step: a worker makes at most 200 rows/s
BATCH = 40
MAX_REPLICAS = 8
PHASES = (("fast", 600.0), ("slow", 200.0), ("gone", None), ("back", 600.0))


@dataclass(frozen=True)
class Setting:
    """One fleet of the comparison: ``fixed`` workers, or autoscaled (0..8) with these settings."""

    fixed: int | None = None
    headroom: float = 0.1
    window_s: int = 8
    start: int = 1
    worker_start: str = "fork"
    """How the fleet starts a worker: forked from the warm server, or a new interpreter (exec)."""
    min_replicas: int = 0

    @property
    def label(self) -> str:
        how = "" if self.worker_start == "fork" else f", workers {self.worker_start}'d"
        if self.fixed is not None:
            return f"fixed, {self.fixed} workers{how}"
        return (
            f"autoscaled {self.min_replicas}..{MAX_REPLICAS} from {self.start}, headroom {self.headroom:g}, "
            f"window {self.window_s} s{how}"
        )


@dataclass
class Result:
    worker_seconds: float
    starved: float
    rows: int
    settle: list[float]
    changes: int
    phase_starved: list[float] = field(default_factory=list)
    """Starvation in each phase the learner reads (nan while it is gone)."""


def job(name: str, setting: Setting, idle_s: int) -> RolloutJob:
    spec: dict[str, object] = {
        "replicas": setting.fixed or setting.start,
        "env": {"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": STEP_S}},
        "sampling": {"rolloutFragmentLength": 20},
        "redis": {"maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
    }
    if setting.fixed is None:
        spec["autoscaling"] = {"minReplicas": setting.min_replicas, "maxReplicas": MAX_REPLICAS, "idleSeconds": idle_s,
                               "windowSeconds": setting.window_s, "scaleDownSeconds": setting.window_s,
                               "headroom": setting.headroom}  # fmt: skip
    return RolloutJob.from_dict({"metadata": {"name": name}, "spec": spec})


class Learner:
    """Takes 40-row batches at ``appetite`` rows/s when fed, not reading at all when the
    appetite is None; in a process of its own, as a learner is (the fleet's loop and its
    autoscaler share no interpreter with it). Its figures come back through shared values:
    rows, seconds starved and seconds reading, as of its last batch or look."""

    def __init__(self, url: str, name: str) -> None:
        context = mp.get_context("spawn")  # the bench runs threads: no fork of this process
        self._appetite = context.Value("d", -1.0)  # < 0: gone
        self._figures = context.Array("d", 3)
        self._stop, ready = context.Event(), context.Event()
        self.process = context.Process(
            target=learn, args=(url, name, self._appetite, self._figures, self._stop, ready), daemon=True
        )
        self.process.start()
        if not ready.wait(120):
            raise SystemExit("the learner process did not start within 120 s")

    @property
    def appetite(self) -> float | None:
        return None if self._appetite.value < 0 else self._appetite.value

    @appetite.setter
    def appetite(self, value: float | None) -> None:
        self._appetite.value = -1.0 if value is None else value

    def totals(self) -> tuple[float, float]:
        """Seconds starved and seconds reading so far."""
        with self._figures.get_lock():
            return self._figures[1], self._figures[2]

    @property
    def rows(self) -> int:
        return int(self._figures[0])

    def close(self) -> None:
        """Stop the learner process; its figures stay readable."""
        self._stop.set()
        self.process.join(15)
        if self.process.is_alive():
            self.process.kill()


def learn(url: str, name: str, appetite_value: Any, figures: Any, stop: Any, ready: Any) -> None:
    """The learner process of :class:`Learner`."""
    consumer: BatchConsumer | None = None
    closed = [0.0, 0.0, 0.0]  # the figures of the consumers closed so far

    def publish() -> list[float]:
        now = list(closed)
        if consumer is not None:
            meter = consumer.appetite.meter
            now = [now[0] + meter.rows, now[1] + meter.starved_s, now[2] + time.monotonic() - meter.started]
        with figures.get_lock():
            figures[:] = now
        return now

    ready.set()
    while not stop.is_set():
        appetite = appetite_value.value
        if appetite < 0:
            if consumer is not None:  # the learner is gone: its process would have ended
                closed = publish()
                consumer.close()
                consumer = None
            time.sleep(0.05)
            continue
        if consumer is None:
            consumer = BatchConsumer(url, name, block_s=0.2, read_count=2, consumer=f"l{time.time()}")
        got = consumer.get(min_steps=BATCH, timeout=0.5)
        publish()
        if got is not None:
            time.sleep(BATCH / appetite)
    publish()
    if consumer is not None:
        consumer.close()


def run(name: str, setting: Setting, phase_s: float, url: str) -> Result:
    spec = job(name, setting, max(5, int(phase_s / 4)))
    fleet = LocalFleet(spec, redis_url=url, grace_seconds=10, start=setting.worker_start)
    learner = Learner(url, name)  # ready before the fleet starts: it reads from the first phase's start
    worker_seconds, changes, settle, phase_starved = 0.0, 0, [], []
    with fleet, contextlib.closing(learner):
        scaler = LocalAutoscaler(fleet) if setting.fixed is None else None
        before = time.monotonic()
        for _, appetite in PHASES:
            learner.appetite = appetite
            began = last_change = time.monotonic()
            starved_before, reading_before = learner.totals()
            size = len(fleet.workers)
            while (now := time.monotonic()) - began < phase_s:
                worker_seconds += (now - before) * fleet.alive()  # the time really passed, on a loaded machine too
                before = now
                fleet.poll()
                if scaler is not None:
                    scaler.tick(now)
                if len(fleet.workers) != size:
                    size, last_change, changes = len(fleet.workers), now, changes + 1
                # As `rolloutfleet run`'s loop: no longer than the autoscaler's next look.
                time.sleep(0.5 if scaler is None else min(0.5, max(0.02, scaler.due_in(time.monotonic()))))
            settle.append(last_change - began)
            starved, reading = learner.totals()
            phase_starved.append((starved - starved_before) / (reading - reading_before) if appetite else math.nan)
    starved_s, reading_s = learner.totals()
    starved = starved_s / reading_s if reading_s else math.nan
    return Result(worker_seconds, starved, learner.rows, settle, changes, phase_starved)


def sweep(args: argparse.Namespace) -> list[Setting]:
    peak = math.ceil(max(a for _, a in PHASES if a) * 1.1 / (1 / STEP_S * 0.85))  # ~85 % of the paced speed
    fixed = [int(f) for f in args.fixed.split(",")] if args.fixed else [peak, peak - 1]
    autoscaled = [
        Setting(None, float(h), int(w), int(n), how, int(low))
        for how in args.worker_start.split(",")
        for low in args.min_replicas.split(",")
        for n in args.start.split(",")
        for h in args.headroom.split(",")
        for w in args.window_seconds.split(",")
    ]
    return [Setting(f) for f in fixed] + autoscaled


def measure(settings: list[Setting], args: argparse.Namespace) -> dict[Setting, list[Result]]:
    """Each setting ``--repeats`` times, repeats interleaved, ``--parallel`` at once."""
    results: dict[Setting, list[Result]] = {s: [] for s in settings}
    plan = [(r, i, s) for r in range(args.repeats) for i, s in enumerate(settings)]
    lock = threading.Lock()
    with EmbeddedRedis() as redis:

        def one(item: tuple[int, int, Setting]) -> None:
            repeat, index, setting = item
            result = run(f"s{index}-r{repeat}", setting, args.phase_seconds, redis.url)
            with lock:
                results[setting].append(result)
                print(f"[{time.strftime('%H:%M:%S')}] {setting.label} #{repeat + 1}: {result.worker_seconds:,.0f} "
                      f"worker-s, starved {result.starved:.1%}, load {os.getloadavg()[0]:.1f}", file=sys.stderr)  # fmt: skip
                if args.json:
                    with open(args.json, "a") as out:
                        out.write(json.dumps({"setting": asdict(setting), "repeat": repeat, **asdict(result)}) + "\n")

        with ThreadPoolExecutor(max_workers=args.parallel) as pool:
            list(pool.map(one, plan))
    return results


def median(results: list[Result], attr: str) -> float:
    return statistics.median(float(getattr(r, attr)) for r in results)


def report(settings: list[Setting], results: dict[Setting, list[Result]]) -> None:
    reading = [i for i, (_, a) in enumerate(PHASES) if a]
    by_phase = " / ".join(PHASES[i][0] for i in reading)
    print(f"| fleet | worker-seconds | learner starved | starved by phase ({by_phase}) | rows to the learner "
          "| settled after each step (s) | changes |")  # fmt: skip
    print("| --- | ---: | ---: | --- | ---: | --- | ---: |")
    for s in settings:
        rs = results[s]
        settle = " / ".join(f"{statistics.median(r.settle[i] for r in rs):.0f}" for i in range(len(PHASES)))
        phases = " / ".join(f"{statistics.median(r.phase_starved[i] for r in rs):.1%}" for i in reading)
        print(f"| {s.label} | {median(rs, 'worker_seconds'):,.0f} | {median(rs, 'starved'):.1%} | {phases} "
              f"| {median(rs, 'rows'):,.0f} | {settle if s.fixed is None else '-'} | {median(rs, 'changes'):.0f} |")  # fmt: skip
    peak = max((s for s in settings if s.fixed is not None), key=lambda s: s.fixed or 0, default=None)
    autoscaled = [s for s in settings if s.fixed is None]
    if peak is None or not autoscaled:
        return
    bar, cost = median(results[peak], "starved"), median(results[peak], "worker_seconds")
    matched = [s for s in autoscaled if median(results[s], "starved") <= bar]
    if matched:
        best = min(matched, key=lambda s: median(results[s], "worker_seconds"))
        saved = 1 - median(results[best], "worker_seconds") / cost
        print(
            f"\nat matched starvation (<= {bar:.1%}, {peak.label}): {best.label} spends {saved:.0%} fewer worker-seconds"
        )
        return
    print(f"\nno autoscaled setting's median starvation is <= {bar:.2%} ({peak.label}, runs "
          f"{', '.join(f'{r.starved:.2%}' for r in results[peak])}):")  # fmt: skip
    for s in sorted(autoscaled, key=lambda s: median(results[s], "worker_seconds")):
        fixed, scaled = [r.starved for r in results[peak]], [r.starved for r in results[s]]
        saved = 1 - median(results[s], "worker_seconds") / cost
        print(f"  {s.label}: {median(results[s], 'starved'):.2%} (runs {', '.join(f'{v:.2%}' for v in scaled)}), "
              f"{saved:.0%} fewer worker-seconds; a difference of medians this large or larger comes with "
              f"{more_starved(scaled, fixed):.0%} of the ways to split these runs at random")  # fmt: skip


def more_starved(scaled: list[float], fixed: list[float]) -> float:
    """An exact permutation test (one-sided): the share of the ways to split the pooled runs
    into groups of these sizes whose difference of medians is at least the observed one. Large
    (say over 5 %): the fleets' starvation cannot be told apart with these runs."""
    pooled = scaled + fixed
    observed = statistics.median(scaled) - statistics.median(fixed)
    splits = list(itertools.combinations(range(len(pooled)), len(scaled)))
    if len(splits) > 200_000:
        return math.nan  # too many runs to enumerate; not needed at the bench's repeats
    at_least = 0
    for chosen in splits:
        picked = set(chosen)
        a = [pooled[i] for i in chosen]
        b = [pooled[i] for i in range(len(pooled)) if i not in picked]
        at_least += statistics.median(a) - statistics.median(b) >= observed - 1e-12
    return at_least / len(splits)


def startup(url: str, repeats: int) -> None:
    """Seconds from starting one worker to its first batch in the stream, forked from the warm
    server and exec'd, interleaved; medians (the first fork, which also starts the server, not counted)."""
    times: dict[str, list[float]] = {"fork": [], "exec": []}
    client = redis.Redis.from_url(url)
    for repeat in range(repeats + 1):
        for how in times:
            name = f"startup-{how}-{repeat}"
            fleet = LocalFleet(job(name, Setting(fixed=1), 60), redis_url=url, grace_seconds=10, start=how)
            stream = job_keys(fleet.job.namespace, name).batches
            began = time.monotonic()
            with fleet:
                while not client.xlen(stream):
                    fleet.poll()
                    if time.monotonic() - began > 120:
                        raise SystemExit(f"worker start ({how}): no batch within 120 s; logs in {fleet.log_dir}")
                    time.sleep(0.01)
                took = time.monotonic() - began
            if repeat:
                times[how].append(took)
    client.close()
    for how, seconds in times.items():
        print(f"worker start ({how}): {statistics.median(seconds):.2f} s from start to its first batch "
              f"(median of {len(seconds)}, {min(seconds):.2f} to {max(seconds):.2f} s)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=60.0, help="each appetite phase lasts this long")
    parser.add_argument("--repeats", type=int, default=1, help="runs per configuration (the table gives medians)")
    parser.add_argument("--headroom", default="0.1", help="autoscaled: comma-separated headroom values to sweep")
    parser.add_argument("--window-seconds", default="8", help="autoscaled: comma-separated windowSeconds to sweep")
    parser.add_argument("--start", default="1", help="autoscaled: comma-separated starting sizes (spec.replicas)")
    parser.add_argument("--worker-start", default="fork",
                        help="autoscaled: comma-separated fork (warm server) and/or exec (fixed fleets: fork)")  # fmt: skip
    parser.add_argument("--min-replicas", default="0", help="autoscaled: comma-separated minReplicas to sweep")
    parser.add_argument("--fixed", default="", help="fixed sizes, comma-separated (default: the peak's and one fewer)")
    parser.add_argument("--parallel", type=int, default=1, help="configurations run at once (more: noisier)")
    parser.add_argument("--startup-repeats", type=int, default=0,
                        help="first time a worker's start to its first batch, forked and exec'd, this many times each")  # fmt: skip
    parser.add_argument("--json", default="", help="append each run's figures to this file (JSON lines)")
    args = parser.parse_args()
    settings = sweep(args)
    load = os.getloadavg()
    print(f"load average before: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores", flush=True)
    if args.startup_repeats:
        with EmbeddedRedis() as server:
            startup(server.url, args.startup_repeats)
    if args.repeats > 0:
        report_runs(settings, args)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} on {os.cpu_count()} cores")


def report_runs(settings: list[Setting], args: argparse.Namespace) -> None:
    results = measure(settings, args)
    phases = ", ".join(f"{n} {a or 0:.0f} rows/s" for n, a in PHASES)
    print(f"\nappetite: {phases}; {args.phase_seconds:.0f} s each; one worker makes <= {1 / STEP_S:.0f} rows/s; "
          f"medians of {args.repeats} run(s), {args.parallel} at once\n")  # fmt: skip
    report(settings, results)


if __name__ == "__main__":
    main()

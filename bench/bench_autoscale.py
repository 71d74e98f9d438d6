"""A fleet sized for the peak against an autoscaled one (``spec.autoscaling``), measured in
one run: real worker processes of a paced env (a fixed wall time per step, no CPU, so the
workers' speed does not depend on how many share the machine), a real redis-server, a
learner in this process whose appetite steps: fast, slow, gone, fast again.

Three fleets: fixed at the peak's size, fixed at one worker fewer (cheaper, starved at the
peak: a fixed fleet's trade of worker-seconds for starvation), and autoscaled. Per
configuration: worker-seconds spent (workers alive, summed over the run), the
learner's starvation (share of its time ``get()`` waited for rows, from its own
``BatchConsumer`` meter, while it runs), rows it got, the time from each appetite step to
the fleet's last change in that phase, and the number of changes.

Usage: ``python -m bench.bench_autoscale [--phase-seconds 60]`` (``make bench-autoscale``).
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from dataclasses import dataclass, field

from rolloutfleet import RolloutJob
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.local_autoscaler import LocalAutoscaler
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.transport.consumer import BatchConsumer

STEP_S = 0.005  # one env step: a worker makes at most 200 rows/s
BATCH = 40
PHASES = (("fast", 600.0), ("slow", 200.0), ("gone", None), ("back", 600.0))


def job(name: str, replicas: int, autoscaling: bool, idle_s: int) -> RolloutJob:
    spec: dict[str, object] = {
        "replicas": replicas,
        "env": {"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": STEP_S}},
        "sampling": {"rolloutFragmentLength": 20},
        "redis": {"maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
    }
    if autoscaling:
        spec["autoscaling"] = {"minReplicas": 0, "maxReplicas": 8, "idleSeconds": idle_s, "windowSeconds": 8,
                               "scaleDownSeconds": 8}  # fmt: skip
    return RolloutJob.from_dict({"metadata": {"name": name}, "spec": spec})


@dataclass
class Learner:
    """Takes 40-row batches at ``appetite`` rows/s when fed (None: not reading at all)."""

    url: str
    name: str
    appetite: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    rows: int = 0
    starved_s: float = 0.0
    reading_s: float = 0.0

    def run(self) -> None:
        consumer: BatchConsumer | None = None
        while not self.stop.is_set():
            if self.appetite is None:
                if consumer is not None:  # the learner is gone: its process would have ended
                    self._count(consumer)
                    consumer.close()
                    consumer = None
                time.sleep(0.1)
                continue
            if consumer is None:
                consumer = BatchConsumer(self.url, self.name, block_s=0.2, read_count=2, consumer=f"l{time.time()}")
            if consumer.get(min_steps=BATCH, timeout=0.5) is not None:
                time.sleep(BATCH / self.appetite)
        if consumer is not None:
            self._count(consumer)
            consumer.close()

    def _count(self, consumer: BatchConsumer) -> None:
        meter = consumer.appetite.meter
        self.rows += meter.rows
        self.starved_s += meter.starved_s
        self.reading_s += time.monotonic() - meter.started


def run(name: str, autoscaling: bool, phase_s: float, peak_workers: int, url: str) -> dict[str, object]:
    idle_s = max(5, int(phase_s / 4))
    fleet = LocalFleet(job(name, peak_workers, autoscaling, idle_s), redis_url=url, grace_seconds=10)
    learner = Learner(url, name)
    thread = threading.Thread(target=learner.run, daemon=True)
    worker_seconds, changes, settle = 0.0, 0, []
    with fleet:
        scaler = LocalAutoscaler(fleet) if autoscaling else None
        thread.start()
        for _, appetite in PHASES:
            learner.appetite = appetite
            began = last_change = time.monotonic()
            size = len(fleet.workers)
            while (now := time.monotonic()) - began < phase_s:
                fleet.poll()
                if scaler is not None:
                    scaler.tick(now)
                if len(fleet.workers) != size:
                    size, last_change, changes = len(fleet.workers), now, changes + 1
                time.sleep(0.5)
                worker_seconds += 0.5 * fleet.alive()
            settle.append(last_change - began)
        learner.stop.set()
        thread.join(15)
    return {
        "worker_seconds": worker_seconds,
        "starved": learner.starved_s / learner.reading_s if learner.reading_s else math.nan,
        "rows": learner.rows,
        "settle": settle,
        "changes": changes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=60.0)
    args = parser.parse_args()
    peak = math.ceil(max(a for _, a in PHASES if a) * 1.1 / (1 / STEP_S * 0.85))  # ~85 % of the paced speed
    with EmbeddedRedis() as redis:
        fixed = run("fixed", False, args.phase_seconds, peak, redis.url)
        fewer = run("fewer", False, args.phase_seconds, peak - 1, redis.url)  # less for its starvation
        elastic = run("elastic", True, args.phase_seconds, 1, redis.url)
    phases = ", ".join(f"{n} {a or 0:.0f} rows/s" for n, a in PHASES)
    print(f"\nappetite: {phases}; {args.phase_seconds:.0f} s each; one worker makes <= {1 / STEP_S:.0f} rows/s\n")
    print("| fleet | worker-seconds | learner starved | rows to the learner | settled after each step (s) | changes |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    rows = (
        (f"fixed, {peak} workers (the peak)", fixed),
        (f"fixed, {peak - 1} workers", fewer),
        ("autoscaled, 0..8", elastic),
    )
    for label, result in rows:
        settle = " / ".join(f"{s:.0f}" for s in result["settle"])  # type: ignore[attr-defined]
        print(f"| {label} | {result['worker_seconds']:,.0f} | {result['starved']:.1%} | {result['rows']:,} "
              f"| {settle} | {result['changes']} |")  # fmt: skip
    saved = 1 - float(elastic["worker_seconds"]) / float(fixed["worker_seconds"])  # type: ignore[arg-type]
    print(f"\nworker-seconds saved by autoscaling: {saved:.0%}")


if __name__ == "__main__":
    main()

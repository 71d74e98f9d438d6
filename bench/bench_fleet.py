"""The local fleet end to end: real worker processes, a real redis-server, a learner-side consumer.

Three figures, each measured side by side in this run:

* **delivered throughput** — env steps/s the learner receives (read, decoded, acked) from
  1 and 2 worker processes, next to the same EnvRunner sampling in-process with no
  transport at all (the ceiling for one worker) and RLlib's SingleAgentEnvRunner figure
  from our earlier same-machine measurement (marked "(anc)", sampling only, no transport);
* **SIGKILL → replacement's first batch** — the fleet notices the exit, restarts the
  worker (backoff 0 here; a manifest's ``backoffSeconds`` adds to it) and the new process
  publishes; next to the same worker's cold start-up (spawn → first batch), since the
  target is "≤ 5 s beyond process start-up";
* **weights publish → every worker sampling with them** — from ``WeightPublisher.publish``
  to the first row stamped with the new ``weights_seq_no`` from every worker, in seconds
  and in fragments (a worker checks for weights between fragments, so the target is
  "within one fragment").

Medians over ``--repeats``; both tables also go to ``out/bench/bench_fleet.json`` (``--out``),
with the machine, for ``python -m bench.plot_results`` to draw.
Usage: ``python -m bench.bench_fleet [--seconds 8] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from bench.results import OUT, Table, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message
from rolloutfleet.transport.weights import WeightPublisher

RLLIB_ANCHOR_64 = 20_500  # measured earlier: SingleAgentEnvRunner, vector_entry_point, 64 CartPoles
RLLIB_ROW = "RLlib SingleAgentEnvRunner (anchor: earlier run, sampling only)"
STARTUP, KILL, WEIGHTS = (
    "worker cold start-up (spawn -> first batch)",
    "SIGKILL -> replacement's first batch (backoff 0)",
    "weights publish -> every worker sampling with them",
)


def job(name: str, replicas: int, num_envs: int = 64, fragment: int = 200) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "env": {"id": "CartPole-v1", "numEnvs": num_envs},
                "policy": {"hidden": [64, 64]},
                "sampling": {"rolloutFragmentLength": fragment, "seed": 0},
                "redis": {"maxLen": 64, "backpressure": "block"},
                "restartPolicy": {"backoffSeconds": 0, "maxRestarts": 100},
            },
        }
    )


def drain(consumer: BatchConsumer, fleet: LocalFleet, timeout: float = 0.05) -> list[Message]:
    fleet.poll()
    messages = consumer.read(timeout=timeout)
    for message in messages:
        len(message.batch)  # decoded, as a learner would
        message.ack()
    return messages


def wait(consumer: BatchConsumer, fleet: LocalFleet, done, deadline_s: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    """Read until ``done(message)`` is true for some message; returns the time it arrived."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for message in drain(consumer, fleet):
            if done(message):
                return time.monotonic()
    raise TimeoutError("the fleet published nothing that matched")


def delivered(redis: EmbeddedRedis, replicas: int, seconds: float, run: int) -> float:
    spec = job(f"thr{replicas}-{run}", replicas)
    consumer = BatchConsumer(redis.url, spec.name, group="bench")
    with LocalFleet(spec, redis_url=redis.url, grace_seconds=5) as fleet:
        seen: set[int] = set()
        wait(consumer, fleet, lambda m: seen.add(m.metadata.worker_index) or len(seen) == replicas)
        # Count what was *produced* in the window (by created_at), so the backlog queued
        # while the workers warmed up does not inflate the figure; read on until the
        # window's last batches have arrived.
        start = time.time()
        end = start + seconds
        steps, last_seen = 0, start
        while last_seen < end and time.time() < end + 30:
            for message in drain(consumer, fleet, timeout=0.5):
                created = message.metadata.created_at
                last_seen = max(last_seen, created)
                if start <= created < end:
                    steps += message.metadata.env_steps
        return steps / seconds


def in_process(seconds: float) -> float:
    runner = EnvRunner(job("inproc", 1))
    runner.sample()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += len(runner.sample())
    return steps / (time.perf_counter() - start)


def restart_latency(redis: EmbeddedRedis, run: int) -> tuple[float, float]:
    """(cold start-up: spawn → first batch, SIGKILL → the replacement's first batch)."""
    spec = job(f"kill-{run}", 1, num_envs=8, fragment=50)
    consumer = BatchConsumer(redis.url, spec.name, group="bench")
    spawned = time.monotonic()
    with LocalFleet(spec, redis_url=redis.url, grace_seconds=5) as fleet:
        producers: set[str] = set()
        first = wait(consumer, fleet, lambda m: producers.add(m.metadata.producer) or True)
        killed = time.monotonic()
        fleet.kill(0)
        replaced = wait(consumer, fleet, lambda m: m.metadata.producer not in producers)
        assert fleet.restarts == 1
        return first - spawned, replaced - killed


def weights_latency(redis: EmbeddedRedis, run: int) -> tuple[float, float]:
    """(seconds, fragments) from publish to the last worker's first row with the new version."""
    replicas = 2
    spec = job(f"weights-{run}", replicas)
    consumer = BatchConsumer(redis.url, spec.name, group="bench")
    zeros = {k: np.zeros_like(v.numpy()) for k, v in build_model(spec).state_dict().items()}
    with LocalFleet(spec, redis_url=redis.url, grace_seconds=5) as fleet:
        created: dict[int, list[float]] = {i: [] for i in range(replicas)}

        def steady(message: Message) -> bool:
            created[message.metadata.worker_index].append(message.metadata.created_at)
            return all(len(c) >= 4 for c in created.values())

        wait(consumer, fleet, steady)
        fragment_s = statistics.median(float(np.median(np.diff(c))) for c in created.values())
        published_at = time.time()
        seq_no = WeightPublisher(redis.url, spec.name).publish(zeros)
        adopted: dict[int, float] = {}

        def using(message: Message) -> bool:
            rows = message.batch["weights_seq_no"]
            if message.metadata.worker_index not in adopted and (rows == seq_no).any():
                # Rows are in sampling order: the fragment's share sampled with the new
                # weights ends at created_at, so adoption started that much earlier.
                share = float((rows == seq_no).mean())
                adopted[message.metadata.worker_index] = message.metadata.created_at - share * fragment_s
            return len(adopted) == replicas

        wait(consumer, fleet, using)
        latency = max(adopted.values()) - published_at
        return max(latency, 0.0), max(latency, 0.0) / fragment_s


def tables(rates: dict[str, list[float]], latencies: dict[str, list[float]], fragments: list[float],
           repeats: int) -> list[Table]:  # fmt: skip
    """The two tables as JSON rows: medians of the repeats; the RLlib row is the earlier anchor."""
    delivered = Table(
        f"fleet, CartPole-v1, 64 envs/worker, fragment 200, MLP 64x64: env steps/s delivered to the learner, "
        f"median of {repeats}",
        "delivered to the learner",
        ["env steps/s"],
        log_y=True,  # the RLlib anchor is ~1/30 of the fleet's rows
    )
    delivered.rows = [{"delivered to the learner": k, "env steps/s": statistics.median(v)} for k, v in rates.items()]
    delivered.rows.append({"delivered to the learner": RLLIB_ROW, "env steps/s": RLLIB_ANCHOR_64})
    timing = Table(f"fleet latencies, median of {repeats}", "event", ["seconds"], unit="s", log_y=True)
    timing.rows = [{"event": k, "seconds": statistics.median(v)} for k, v in latencies.items()]
    timing.rows[-1]["fragments"] = statistics.median(fragments)  # the weights row: target <= 1 fragment
    return [delivered, timing]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()

    redis = EmbeddedRedis().start()
    try:
        rates: dict[str, list[float]] = {
            "in-process EnvRunner (ceiling, 1 worker)": [],
            "fleet, 1 worker": [],
            "fleet, 2 workers": [],
        }
        startups, kills, weights_s, weights_frag = [], [], [], []
        for run in range(args.repeats):  # interleaved: every figure sees the same noise
            rates["in-process EnvRunner (ceiling, 1 worker)"].append(in_process(args.seconds))
            rates["fleet, 1 worker"].append(delivered(redis, 1, args.seconds, run))
            rates["fleet, 2 workers"].append(delivered(redis, 2, args.seconds, run))
            startup, kill = restart_latency(redis, run)
            startups.append(startup)
            kills.append(kill)
            seconds, fragments = weights_latency(redis, run)
            weights_s.append(seconds)
            weights_frag.append(fragments)
    finally:
        redis.stop()

    ceiling = statistics.median(rates["in-process EnvRunner (ceiling, 1 worker)"])
    print(f"\nFleet, CartPole-v1, 64 envs/worker, fragment 200, MLP 64x64; medians of {args.repeats}")
    print(f"{'delivered to the learner':<44} {'steps/s':>10} {'vs ceiling':>11} {'vs RLlib':>10}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:<44} {median:>10,.0f} {median / ceiling:>10.0%} {median / RLLIB_ANCHOR_64:>9.1f}x")
    print(f"{'RLlib SingleAgentEnvRunner (anc), sampling only':<44} {RLLIB_ANCHOR_64:>10,}")
    startup, kill = statistics.median(startups), statistics.median(kills)
    print(f"\nworker cold start-up (spawn -> first batch)        {startup:6.2f} s")
    print(
        f"SIGKILL -> replacement's first batch (backoff 0)   {kill:6.2f} s  ({kill - startup:+.2f} s beyond start-up)"
    )
    print(
        f"weights publish -> every worker sampling with them {statistics.median(weights_s):6.3f} s"
        f"  ({statistics.median(weights_frag):.2f} fragments; target <= 1)"
    )
    latencies = {STARTUP: startups, KILL: kills, WEIGHTS: weights_s}
    write("bench_fleet", tables(rates, latencies, weights_frag, args.repeats), machine(), args.out)


if __name__ == "__main__":
    main()

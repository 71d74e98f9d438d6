"""What one worker pod costs: memory and start-up of a real ``rolloutfleet worker`` process.

The job is ``examples/cartpole.yaml`` (1 worker, 8 CartPoles, the default 64x64 MLP), run
against a real redis-server as a pod runs it (settings from ``ROLLOUTFLEET_*`` variables):

* **cold start** — spawn → the first batch is in the Redis stream;
* **RSS** — of the worker's process tree (/proc), read once three batches are published;
  whether torch is mapped into the process is read from ``/proc/PID/maps``.

Two policies, alternating run by run so both see the same machine: the default (numpy
inference on the CPU, no torch) and the same MLP with ``inference: torch`` on the CPU (what
every worker paid before). Medians over ``--repeats``; targets from issue 15.

Usage: ``python -m bench.bench_footprint [--repeats 5]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.redis_keys import job_keys
from rolloutfleet.spec.worker_config import WorkerConfig

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cartpole.yaml"
BEFORE = {"rss_mb": 576, "start_s": 3.7}  # main before issue 15, same example, same machine
TARGETS = {"default": {"rss_mb": 150.0, "start_s": 1.5}, "torch": {"rss_mb": 300.0}}
POLICIES = {"default": {}, "torch": {"inference": "torch", "device": "cpu"}}


def tree_rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, in kB."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
    return total


def one_worker(redis_url: str, policy: str, run: int) -> tuple[float, float, bool]:
    """(seconds spawn → first batch, RSS MB after three batches, torch mapped) for one worker."""
    job = RolloutJob.from_file(EXAMPLE).to_dict()
    job["metadata"]["name"] = f"footprint-{policy}-{run}"
    job["spec"]["replicas"] = 1
    job["spec"]["policy"].update(POLICIES[policy])
    config = WorkerConfig(
        job=RolloutJob.from_dict(job), worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=free_port()
    )
    stream = job_keys(config.job.namespace, config.job.name).batches
    client = redis.Redis.from_url(redis_url)
    env = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": os.devnull}
    spawned = time.monotonic()
    worker = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=env)
    try:
        first = _wait(client, stream, 1, worker)
        startup = first - spawned
        _wait(client, stream, 3, worker)
        rss_mb = tree_rss_kb(worker.pid) / 1024
        torch_mapped = "libtorch" in Path(f"/proc/{worker.pid}/maps").read_text()
        worker.terminate()
        worker.wait(30)
        return startup, rss_mb, torch_mapped
    finally:
        worker.kill()
        client.delete(stream)
        client.close()


def _wait(client: redis.Redis, stream: str, entries: int, worker: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if client.xlen(stream) >= entries:
            return time.monotonic()
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode}")
        time.sleep(0.005)
    raise TimeoutError(f"no {entries} batches in {stream}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {p: {"start_s": [], "rss_mb": [], "torch": []} for p in POLICIES}
    with EmbeddedRedis() as server:
        for run in range(args.repeats):  # interleaved: both policies see the same noise
            for policy in POLICIES:
                startup, rss_mb, torch_mapped = one_worker(server.url, policy, run)
                figures[policy]["start_s"].append(startup)
                figures[policy]["rss_mb"].append(rss_mb)
                figures[policy]["torch"].append(float(torch_mapped))

    print(f"\nWorker footprint: examples/cartpole.yaml, 1 worker x 8 CartPoles; medians of {args.repeats}")
    print(f"{'worker':<44} {'RSS MB':>8} {'target':>8} {'start s':>8} {'target':>8} {'torch':>6}")
    for policy, label in [
        ("default", "default MLP, numpy inference (CPU)"),
        ("torch", "same MLP, inference: torch (CPU)"),
    ]:
        rss, start = statistics.median(figures[policy]["rss_mb"]), statistics.median(figures[policy]["start_s"])
        target = TARGETS[policy]
        rss_target = f"<= {target['rss_mb']:.0f}"
        start_target = f"<= {target['start_s']}" if "start_s" in target else "-"
        loaded = "yes" if all(figures[policy]["torch"]) else "no" if not any(figures[policy]["torch"]) else "mixed"
        print(f"{label:<44} {rss:>8.0f} {rss_target:>8} {start:>8.2f} {start_target:>8} {loaded:>6}")
    print(f"{'main before issue 15 (anc), default MLP':<44} {BEFORE['rss_mb']:>8} {'':>8} {BEFORE['start_s']:>8.2f}")


if __name__ == "__main__":
    main()

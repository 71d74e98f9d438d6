"""What one worker pod costs: memory and start-up of a real ``rolloutfleet worker`` process.

The job is ``examples/cartpole.yaml`` (1 worker, 8 CartPoles, the default 64x64 MLP), run
against a real redis-server as a pod runs it (settings from ``ROLLOUTFLEET_*`` variables):

* **cold start** — spawn → the first batch is in the Redis stream, and the CPU seconds the
  worker spent by then (on a shared machine the wall clock stretches with the load);
* **RSS** — of the worker's process tree (/proc), read once three batches are published;
  whether torch is mapped into the process is read from ``/proc/PID/maps``.

Two policies, alternating run by run so both see the same machine: the default (numpy
inference on the CPU, no torch) and the same MLP with ``inference: torch`` on the CPU (what
every worker paid before). Medians over ``--repeats``; targets from issue 15.

Both tables (RSS; start-up) also go to ``out/bench/bench_footprint.json`` (``--out``), with
the machine, for ``python -m bench.plot_results`` to draw.

Usage: ``python -m bench.bench_footprint [--repeats 5]``
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from bench.results import OUT, Table, machine, write
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.keys import job_keys

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cartpole.yaml"
BEFORE = {"rss_mb": 576, "start_s": 3.7}  # main before issue 15, same example, same machine
TARGETS = {"default": {"rss_mb": 150.0, "start_s": 1.5}, "torch": {"rss_mb": 300.0}}
POLICIES = {"default": {}, "torch": {"inference": "torch", "device": "cpu"}}
LABELS = {"default": "default MLP, numpy inference (CPU)", "torch": "same MLP, inference: torch (CPU)"}
BEFORE_LABEL = "main before issue 15 (anchor: earlier run), default MLP"


def tree(pid: int) -> list[int]:
    """``pid`` and all its live descendants."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        found.append(current)
    return found


def tree_rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants, in kB."""
    total = 0
    for member in tree(pid):
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return total


CUDA_LIBRARY = re.compile(r"/lib(cu[a-zA-Z]+|nv[a-zA-Z]+|torch_cuda|nccl|cudnn[a-z_]*)[^/]*\.so[^/]*$")


def cuda_library_mb(pid: int) -> float:
    """Resident MB in the CUDA libraries' mappings and the anonymous ones right after them
    (their .bss): what a CPU-only torch build does not load. A lower bound: what their
    initializers put on the heap is not counted."""
    kb, in_cuda = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            path = head[5] if len(head) > 5 else ""
            in_cuda = bool(CUDA_LIBRARY.search(path)) or (in_cuda and path == "")
        elif head and head[0] == "Rss:" and in_cuda:
            kb += int(head[1])
    return kb / 1024


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) spent so far by ``pid`` and its live descendants: what
    start-up costs, whatever else the machine's cores are doing meanwhile."""
    ticks = 0
    for member in tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rpartition(")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def one_worker(redis_url: str, policy: str, run: int) -> dict[str, float]:
    """One worker's figures: ``start_s`` (spawn → first batch), ``cpu_s`` (CPU seconds by
    then), ``rss_mb`` (after three batches), ``torch`` (1 if mapped), ``cuda_mb``."""
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
        figures = {"start_s": first - spawned, "cpu_s": tree_cpu_s(worker.pid)}
        _wait(client, stream, 3, worker)
        figures["rss_mb"] = tree_rss_kb(worker.pid) / 1024
        figures["torch"] = float("libtorch" in Path(f"/proc/{worker.pid}/maps").read_text())
        figures["cuda_mb"] = cuda_library_mb(worker.pid)
        worker.terminate()
        worker.wait(30)
        return figures
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


def tables(median: dict[str, dict[str, float]], repeats: int) -> list[Table]:
    """RSS and start-up as JSON tables: this run's medians, the targets, the anchor before issue 15."""
    title = f"worker footprint, examples/cartpole.yaml, 1 worker x 8 CartPoles, median of {repeats}"
    rss = Table(f"{title}: RSS of the process tree", "worker", ["RSS", "target"], unit="MB")
    start = Table(
        f"{title}: spawn -> first batch in the stream", "worker", ["start-up (wall clock)", "CPU", "target"], unit="s"
    )
    for policy, label in LABELS.items():
        m, target = median[policy], TARGETS[policy]
        rss.rows.append({"worker": label, "RSS": m["rss_mb"], "target": target["rss_mb"]})
        start.rows.append(
            {"worker": label, "start-up (wall clock)": m["start_s"], "CPU": m["cpu_s"], "target": target.get("start_s")}
        )
    rss.rows.append({"worker": BEFORE_LABEL, "RSS": BEFORE["rss_mb"], "target": None})
    start.rows.append({"worker": BEFORE_LABEL, "start-up (wall clock)": BEFORE["start_s"], "CPU": None, "target": None})
    return [rss, start]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    figures: dict[str, dict[str, list[float]]] = {policy: {} for policy in POLICIES}
    with EmbeddedRedis() as server:
        for run in range(args.repeats):  # interleaved: both policies see the same noise
            for policy in POLICIES:
                for name, value in one_worker(server.url, policy, run).items():
                    figures[policy].setdefault(name, []).append(value)
    load = os.getloadavg()[0]

    median = {p: {name: statistics.median(values) for name, values in f.items()} for p, f in figures.items()}
    print(f"\nWorker footprint: examples/cartpole.yaml, 1 worker x 8 CartPoles; medians of {args.repeats}")
    print(f"{'worker':<42} {'RSS MB':>7} {'target':>7} {'start s':>8} {'target':>7} {'CPU s':>6} {'torch':>6}")
    for policy, label in LABELS.items():
        m, target = median[policy], TARGETS[policy]
        start_target = f"<= {target['start_s']}" if "start_s" in target else "-"
        loaded = "yes" if all(figures[policy]["torch"]) else "no" if not any(figures[policy]["torch"]) else "mixed"
        print(
            f"{label:<42} {m['rss_mb']:>7.0f} {'<= ' + format(target['rss_mb'], '.0f'):>7} {m['start_s']:>8.2f} "
            f"{start_target:>7} {m['cpu_s']:>6.2f} {loaded:>6}"
        )
    print(f"{'main before issue 15 (anc), default MLP':<42} {BEFORE['rss_mb']:>7} {'':>7} {BEFORE['start_s']:>8.2f}")
    print(
        f"of the torch worker's RSS, CUDA libraries (file + .bss; a CPU-only torch build, the -cpu image, "
        f"loads none): {median['torch']['cuda_mb']:.0f} MB"
    )
    ratio = median["default"]["start_s"] / median["torch"]["start_s"]
    print(
        f"start-up, numpy vs torch worker in this run: {ratio:.2f}x the time "
        f"(CPU: {median['default']['cpu_s'] / median['torch']['cpu_s']:.2f}x); 1-min load average {load:.1f} "
        f"on {os.cpu_count()} CPUs (wall-clock start-up stretches with the load, CPU seconds do not)"
    )
    write("bench_footprint", tables(median, args.repeats), machine(), args.out)


if __name__ == "__main__":
    main()

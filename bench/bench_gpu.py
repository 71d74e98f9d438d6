"""Policy inference on the GPU next to the CPU: our EnvRunner's env steps/s, in one run.

Three workloads, each at numEnvs 64 / 256 / 1 024 (``--envs``):

* **mlp** — CartPole-v1 (gymnasium's vector env) with a 256x256 tanh MLP
  (``policy.hidden: [256, 256]``);
* **lstm** — the same env with a recurrent policy: a 256 MLP trunk, an LSTM of 256, each
  sub-env's state carried and recorded per row (``policy.recurrent``; torch on both devices);
* **cnn** — 4x84x84 uint8 frame stacks (``bench.frames_env``: Atari-shaped frames that cost one
  copy per step, so the policy's cost shows) with the default Nature CNN.

Columns: the bare vector env stepped with random actions (the ceiling); our runner with
``device: cpu`` (numpy inference for the MLP, torch for the CNN, ``policy.numThreads`` 1 as in
a worker); our runner with ``device: cuda`` — the policy batched on the GPU for all sub-envs,
observations copied over once per step through a pinned buffer, outputs back once. Where no
CUDA device is usable the GPU column is not measured and the reason is printed (this bench
never fails for want of a GPU). Medians of interleaved repeats; whole ``sample()`` calls.

Usage: ``python -m bench.bench_gpu [--seconds 2] [--repeats 3] [--envs 64 256 1024] [--only mlp|cnn]``
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import bench.frames_env  # noqa: F401  # registers RolloutFleetFrames-v0
from bench.bench_sampling import rate
from bench.results import OUT, Table, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.inference.cpu_threads import limit_cpu_threads
from rolloutfleet.inference.device import driver_device_count, usable_cuda_devices
from rolloutfleet.sampling.heap import keep_freed_memory

WORKLOADS: dict[str, dict[str, Any]] = {
    "mlp": {"env": "CartPole-v1", "policy": {"hidden": [256, 256]}, "rows": 12_800},
    "lstm": {
        "env": "CartPole-v1",
        "policy": {"hidden": [256], "recurrent": {"cell": "lstm", "size": 256}},
        "rows": 12_800,
    },
    "cnn": {"env": "RolloutFleetFrames-v0", "policy": {}, "rows": 2_048},
}
"""``rows``: about this many rows per sample() call (the fragment is rows // numEnvs, at least 2):
a 1 024-env CNN batch of 2 048 rows is already ~115 MB of frames."""


def gpu_unavailable() -> str | None:
    """Why the GPU column cannot be measured here, or None when a CUDA device is usable."""
    if usable_cuda_devices():
        return None
    if driver_device_count():
        return f"the CUDA driver reports {driver_device_count()} device(s) but this torch cannot use them (CPU-only build?)"
    return "no CUDA device on this machine (the driver reports none)"


def bare(env_id: str, num_envs: int) -> Callable[[], int]:
    env = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    env.reset(seed=0)
    rng, n_actions = np.random.default_rng(0), int(env.single_action_space.n)  # type: ignore[attr-defined]

    def step() -> int:
        for _ in range(20):
            env.step(rng.integers(0, n_actions, num_envs))
        return 20 * num_envs

    return step


def ours(workload: str, num_envs: int, device: str) -> Callable[[], int]:
    spec = WORKLOADS[workload]
    fragment = max(2, spec["rows"] // num_envs)
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "bench-gpu"},
            "spec": {
                "env": {"id": spec["env"], "numEnvs": num_envs, "vectorization": "vector"},
                "policy": {**spec["policy"], "device": device},
                "sampling": {"seed": 0, "rolloutFragmentLength": fragment},
            },
        }
    )
    runner = EnvRunner(job)
    return lambda: len(runner.sample())


def pct(ratio: float) -> str:
    return f"{ratio:.0%}" if ratio >= 0.1 else f"{ratio:.1%}"


def section(workload: str, args: argparse.Namespace, why_no_gpu: str | None) -> Table:
    label = {
        "mlp": "CartPole-v1, MLP 256x256",
        "lstm": "CartPole-v1, MLP 256 + LSTM 256",
        "cnn": "4x84x84 uint8 frames, Nature CNN",
    }[workload]
    print(f"\n{workload}: {label}, env steps/s, median of {args.repeats} x {args.seconds}s")
    table = Table(
        f"{label}: env steps/s, median of {args.repeats} x {args.seconds:g} s",
        "envs",
        ["ceiling", "cpu", "gpu"],
        log_y=True,  # the bare env runs 10-200x faster than a policy acting
    )
    print(
        f"{'envs':>5} {'ceiling':>11} {'ours cpu':>10} {'ours gpu':>10} {'cpu/ceiling':>12} {'gpu/ceiling':>12} {'gpu/cpu':>8}"
    )
    for n in args.envs:
        runs = {"ceiling": bare(WORKLOADS[workload]["env"], n), "cpu": ours(workload, n, "cpu")}
        if why_no_gpu is None:
            runs["gpu"] = ours(workload, n, "cuda")
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all alike
            for name, step in runs.items():
                samples[name].append(rate(step, args.seconds))
        med = {k: statistics.median(v) for k, v in samples.items()}
        ceiling, cpu, gpu = med["ceiling"], med["cpu"], med.get("gpu")
        cells = [f"{n:>5}", f"{ceiling:>11,.0f}", f"{cpu:>10,.0f}", f"{gpu:>10,.0f}" if gpu else f"{'-':>10}"]
        cells += [f"{pct(cpu / ceiling):>12}", f"{pct(gpu / ceiling):>12}" if gpu else f"{'-':>12}"]
        cells += [f"{gpu / cpu:>7.1f}x" if gpu else f"{'-':>8}"]
        print(" ".join(cells), flush=True)
        table.rows.append({"envs": n, "ceiling": ceiling, "cpu": cpu, "gpu": gpu})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--only", choices=sorted(WORKLOADS), help="run only this workload")
    args = parser.parse_args()
    limit_cpu_threads(1)  # policy.numThreads' default, as in a worker process
    keep_freed_memory()  # process-wide, as in a worker process
    why_no_gpu = gpu_unavailable()
    print("GPU inference bench: device cpu vs cuda, same jobs, same run")
    if why_no_gpu is not None:
        print(f"GPU column not measured: {why_no_gpu}")
    tables = [section(workload, args, why_no_gpu) for workload in ([args.only] if args.only else list(WORKLOADS))]
    write("bench_gpu", tables, machine(gpu=gpu_name() if why_no_gpu is None else None), args.out)


def gpu_name() -> str:
    import torch

    return str(torch.cuda.get_device_name(0))


if __name__ == "__main__":
    main()

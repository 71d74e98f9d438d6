"""Heavy envs over the cores: env steps/s of a CPU-bound env at 1 and 2 cores.

The env is :mod:`bench.heavy_env`'s CartPole that burns ``--burn-ms`` of CPU per step (a
stand-in for a Box2D/MuJoCo step). The bench process (and so every env subprocess it
starts) is pinned to the first 1, then 2, CPUs with ``os.sched_setaffinity``. Rows, env
steps/s, medians of interleaved repeats:

* sync: our EnvRunner, ``vectorization: sync`` (all sub-envs in the worker process);
* async: our EnvRunner, ``vectorization: async`` (one process per CPU, each stepping its
  group of sub-envs);
* auto: our EnvRunner, ``vectorization: auto`` (times a sub-env step, then picks);
* gym async: bare ``gymnasium.vector.AsyncVectorEnv`` of the same sub-envs (one process per
  sub-env), random actions, no policy;
* rllib sync / rllib async: RLlib's ``SingleAgentEnvRunner`` on the same env with the same
  model (64x64 tanh MLP, value head on the shared layers), ``gym_env_vectorize_mode`` ``sync`` and
  ``async`` (gymnasium's vector envs: one process per sub-env), ``sample()`` of the same fragment:
  measured when ray is installed (``make bench-peer`` runs this bench in RLlib's venv too).

Usage: ``python -m bench.bench_async [--envs 2 4 8] [--cores 1 2] [--burn-ms 2] [--seconds 2] [--repeats 3]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from bench.bench_sampling import rate
from bench.heavy_env import make
from bench.results import OUT, Table, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.inference.cpu_threads import limit_cpu_threads
from rolloutfleet.sampling.heap import keep_freed_memory
from rolloutfleet.sampling.vector.make import EnvContext

FRAGMENT = 10


def ours(num_envs: int, vectorization: str, burn_ms: float) -> tuple[Callable[[], int], Any]:
    env = {"entryPoint": "bench.heavy_env:make", "config": {"burnMs": burn_ms}, "numEnvs": num_envs}
    spec = {"env": {**env, "vectorization": vectorization}, "sampling": {"seed": 0, "rolloutFragmentLength": FRAGMENT}}
    job = RolloutJob.from_dict({"metadata": {"name": "bench"}, "spec": spec})
    limit_cpu_threads(job.spec.policy.num_threads)
    keep_freed_memory()  # process-wide, as in a worker process
    runner = EnvRunner(job)
    return (lambda: len(runner.sample())), runner


def bare(num_envs: int, burn_ms: float) -> tuple[Callable[[], int], Any]:
    fns = [lambda i=i: make(EnvContext({"burnMs": burn_ms}, 0, i, 1)) for i in range(num_envs)]
    env = gym.vector.AsyncVectorEnv(fns)
    env.reset(seed=0)

    def step() -> int:
        for _ in range(FRAGMENT):
            env.step(env.action_space.sample())
        return FRAGMENT * num_envs

    return step, env


def rllib(num_envs: int, burn_ms: float, mode: str) -> tuple[Callable[[], int], Any] | None:
    """RLlib's env runner on the heavy env, ``mode`` ``sync`` or ``async``; None without ray."""
    try:
        from ray.rllib.algorithms.ppo import PPOConfig  # type: ignore[import-not-found]
        from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # type: ignore[import-not-found]
        from ray.tune.registry import register_env  # type: ignore[import-not-found]
    except ImportError:
        return None
    register_env("rolloutfleet-heavy", lambda config: make(EnvContext(dict(config), 0, 0, 1)))
    model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": True}
    config = (
        PPOConfig()
        .environment("rolloutfleet-heavy", env_config={"burnMs": burn_ms})
        .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=FRAGMENT, gym_env_vectorize_mode=mode)
        .rl_module(model_config=model)
    )
    runner = SingleAgentEnvRunner(config=config)

    class Closing:
        def close(self) -> None:
            runner.stop()

    return (lambda: sum(len(e) for e in runner.sample(num_timesteps=FRAGMENT * num_envs))), Closing()


def measure(num_envs: int, args: argparse.Namespace) -> dict[str, float]:
    built = {
        "sync": ours(num_envs, "sync", args.burn_ms),
        "async": ours(num_envs, "async", args.burn_ms),
        "auto": ours(num_envs, "auto", args.burn_ms),
        "gym": bare(num_envs, args.burn_ms),
    }
    for mode in ("sync", "async"):
        peer = rllib(num_envs, args.burn_ms, mode)
        if peer is not None:
            built[f"rllib {mode}"] = peer
    samples: dict[str, list[float]] = {name: [] for name in built}
    try:
        for _ in range(args.repeats):  # interleaved: drift on a shared machine hits all rows alike
            for name, (step, _) in built.items():
                samples[name].append(rate(step, args.seconds))
    finally:
        for _, closeable in built.values():
            closeable.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--cores", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--burn-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    available = sorted(os.sched_getaffinity(0))
    print(
        f"heavy env (CartPole + {args.burn_ms} ms CPU per step), EnvRunner MLP 64x64, env steps/s, "
        f"median of {args.repeats} x {args.seconds}s; ideal per core: {1000 / args.burn_ms:,.0f}"
    )
    peer = importlib.util.find_spec("ray") is not None
    print(
        f"{'cores':>5} {'envs':>5} {'sync':>8} {'async':>8} {'auto':>8} {'gym async':>10}"
        f" {'async/sync':>11} {'async/gym':>10} {'auto/best':>10}"
        + (f" {'rllib sync':>11} {'rllib async':>12} {'ours/rllib':>11}" if peer else "")
    )
    table = Table(
        f"heavy env (CartPole + {args.burn_ms:g} ms CPU per step), EnvRunner MLP 64x64: env steps/s, "
        f"median of {args.repeats} x {args.seconds:g} s",
        "cores x envs",
        ["sync", "async", "auto", "gym", *(["rllib sync", "rllib async"] if peer else [])],
    )
    for cores in args.cores:
        if cores > len(available):
            print(f"{cores:>5} skipped: this process may use {len(available)} CPU(s)")
            continue
        os.sched_setaffinity(0, available[:cores])  # env subprocesses inherit it
        for n in args.envs:
            med = measure(n, args)
            print(
                f"{cores:>5} {n:>5} {med['sync']:>8,.0f} {med['async']:>8,.0f} {med['auto']:>8,.0f} {med['gym']:>10,.0f}"
                f" {med['async'] / med['sync']:>10.2f}x {med['async'] / med['gym']:>9.2f}x"
                f" {med['auto'] / max(med['sync'], med['async']):>9.0%}"
                + (
                    f" {med['rllib sync']:>11,.0f} {med['rllib async']:>12,.0f}"
                    f" {med['auto'] / max(med['rllib sync'], med['rllib async']):>10.2f}x"
                    if peer
                    else ""
                ),
                flush=True,
            )
            table.rows.append({"cores x envs": f"{cores} x {n}", **med})
    os.sched_setaffinity(0, available)
    write("bench_async", [table], machine(), args.out)
    if not peer:
        print("RLlib not measured: ray is not installed here (make bench-peer measures it in the same run)")


if __name__ == "__main__":
    main()

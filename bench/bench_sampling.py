"""Sampling throughput: our EnvRunner next to the bare environments, measured in one run.

Rows (env steps/s, every sub-env step counted, medians of interleaved repeats):

* ceiling: ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")`` stepped
  with ``action_space.sample()`` — the fastest way gymnasium offers to step CartPole;
* SyncVectorEnv with random actions;
* EnvRunner with the default 64x64 MLP (auto vectorization), full ``sample()`` calls, with
  numpy's BLAS threads limited to ``policy.numThreads`` (1) as in a worker process (the
  limit is process-wide, so it holds for every row);
* RLlib's SingleAgentEnvRunner: measured here when ray is installed (``make bench-peer``
  runs this in a venv with RLlib), else the figure measured earlier on a 2-core machine of this kind, marked as such.

Then the recurrent section: EnvRunner on CartPole with the feed-forward 64x64 MLP (numpy, and
torch with ``inference: torch``) next to the same MLP under an LSTM (``policy.recurrent``,
256 units) and a GRU, same run, interleaved.

Both tables also go to ``out/bench/bench_sampling.json`` (``--out``), with the machine, for
``python -m bench.plot_results`` to draw.

Usage: ``python -m bench.bench_sampling [--seconds 2] [--repeats 3] [--envs 1 8 64 256 1024] [--only recurrent]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from bench.results import OUT, Table, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.inference.cpu_threads import limit_cpu_threads
from rolloutfleet.sampling.heap import keep_freed_memory

# Measured earlier, 2-core machine of this workplace, same env and model: used only when ray
# is not installed, and printed as "(anchors)".
RLLIB_ANCHOR = {1: 2_200, 8: 10_800, 64: 15_500}


def rate(step: Callable[[], int], seconds: float) -> float:
    step()  # warm-up
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        steps += step()
    return steps / elapsed


def bare(mode: str, num_envs: int) -> Callable[[], int]:
    env = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode=mode)
    env.reset(seed=0)

    def step() -> int:
        for _ in range(100):
            env.step(env.action_space.sample())
        return 100 * num_envs

    return step


def ours(num_envs: int, **policy: Any) -> Callable[[], int]:
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "bench"},
            "spec": {
                "env": {"id": "CartPole-v1", "numEnvs": num_envs},
                "policy": policy,
                "sampling": {"seed": 0},
            },
        }
    )
    limit_cpu_threads(job.spec.policy.num_threads)  # as `rolloutfleet worker` does
    keep_freed_memory()  # process-wide, as in a worker process
    runner = EnvRunner(job)
    return lambda: len(runner.sample())


def rllib(num_envs: int) -> Callable[[], int] | None:
    try:
        from ray.rllib.algorithms.ppo import PPOConfig  # type: ignore[import-not-found]
        from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # type: ignore[import-not-found]
    except ImportError:
        return None
    # The same model as ours: 64x64 tanh MLP, value head on the shared layers.
    model = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh", "vf_share_layers": True}
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=num_envs, rollout_fragment_length=200)
        .rl_module(model_config=model)
    )
    runner = SingleAgentEnvRunner(config=config)
    return lambda: sum(len(e) for e in runner.sample(num_timesteps=200 * num_envs))


RECURRENT_RUNS: dict[str, dict[str, Any]] = {  # all on the CPU, one torch thread (the default)
    "ff numpy": {"device": "cpu"},
    "ff torch": {"device": "cpu", "inference": "torch"},
    "lstm 256": {"device": "cpu", "recurrent": {"cell": "lstm", "size": 256}},
    "gru 256": {"device": "cpu", "recurrent": {"cell": "gru", "size": 256}},
}


def recurrent_section(args: argparse.Namespace) -> Table:
    """Stateful sampling's cost: the same job with and without a recurrent cell, interleaved."""
    table = Table(
        f"recurrent policies, CartPole-v1, trunk MLP 64x64: EnvRunner env steps/s, median of {args.repeats} x "
        f"{args.seconds:g} s",
        "envs",
        list(RECURRENT_RUNS),
    )
    print(
        f"\nrecurrent policies, CartPole-v1, trunk MLP 64x64, EnvRunner env steps/s, median of {args.repeats} x "
        f"{args.seconds}s"
    )
    print(f"{'envs':>5} " + " ".join(f"{name:>10}" for name in RECURRENT_RUNS) + f" {'lstm/ff torch':>14}")
    for n in [n for n in args.envs if n <= 64]:  # a 256-unit LSTM on 1 024 envs: minutes per row
        runs = {name: ours(n, **policy) for name, policy in RECURRENT_RUNS.items()}
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):
            for name, step in runs.items():
                samples[name].append(rate(step, args.seconds))
        med = {k: statistics.median(v) for k, v in samples.items()}
        cells = " ".join(f"{med[name]:>10,.0f}" for name in RECURRENT_RUNS)
        print(f"{n:>5} {cells} {med['lstm 256'] / med['ff torch']:>13.0%}", flush=True)
        table.rows.append({"envs": n, **med})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 64, 256, 1024])
    parser.add_argument("--only", choices=["recurrent"], help="run only this section")
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    if args.only == "recurrent":
        write("bench_sampling", [recurrent_section(args)], machine(), args.out)
        return
    print(
        f"sampling, CartPole-v1, MLP 64x64, env steps/s, median of {args.repeats} x {args.seconds}s (pid {os.getpid()})"
    )
    header = (
        f"{'envs':>5} {'ceiling':>11} {'sync':>11} {'ours':>11} {'rllib':>16} {'ours/ceiling':>13} {'ours/rllib':>11}"
    )
    print(header)
    measured_peer = importlib.util.find_spec("ray") is not None
    peer_column = "rllib" if measured_peer else "rllib (anchor: earlier run)"
    table = Table(
        f"sampling, CartPole-v1, MLP 64x64: env steps/s, median of {args.repeats} x {args.seconds:g} s",
        "envs",
        ["ceiling", "sync", "ours", peer_column],
        log_y=True,
    )
    for n in args.envs:
        runs: dict[str, Callable[[], int]] = {
            "ceiling": bare("vector_entry_point", n),
            "sync": bare("sync", n),
            "ours": ours(n),
        }
        peer = rllib(n)
        if peer is not None:
            runs["rllib"] = peer
        samples: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all alike
            for name, step in runs.items():
                samples[name].append(rate(step, args.seconds))
        med = {k: statistics.median(v) for k, v in samples.items()}
        peer_rate = med.get("rllib", RLLIB_ANCHOR.get(n, float("nan")))
        if peer_rate != peer_rate:  # no anchor at this size
            peer_label, peer_ratio = "n/a", "n/a"
        else:
            peer_label = f"{peer_rate:>11,.0f}" + ("" if "rllib" in med else " (anc)")
            peer_ratio = f"{med['ours'] / peer_rate:.1f}x"
        print(
            f"{n:>5} {med['ceiling']:>11,.0f} {med['sync']:>11,.0f} {med['ours']:>11,.0f} {peer_label:>16}"
            f" {med['ours'] / med['ceiling']:>12.0%} {peer_ratio:>11}"
        )
        peer_value = None if peer_rate != peer_rate else peer_rate
        table.rows.append({"envs": n, "ceiling": med["ceiling"], "sync": med["sync"], "ours": med["ours"],
                           peer_column: peer_value})  # fmt: skip
    if not measured_peer:
        print(
            "(anc): RLlib is not installed here; the figure is one measured earlier on a 2-core machine of this kind. `make bench-peer` measures it"
        )
    write("bench_sampling", [table, recurrent_section(args)], machine(), args.out)


if __name__ == "__main__":
    main()

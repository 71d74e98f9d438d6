"""Atari throughput: Pong env steps/s through gymnasium and EnvPool, bare and through our EnvRunner.

One env step is one agent step (4 emulator frames), preprocessed DeepMind-style (grayscale
84x84, max-pooled over the skipped frames, 4 frames stacked), sticky actions 0.25 (v5):

* gym sync: gymnasium's ``SyncVectorEnv`` of ``ALE/Pong-v5`` inside ``AtariPreprocessing``
  and ``FrameStackObservation``, random actions: the env itself, no sampler;
* ours/gym: our ``EnvRunner`` on the same sub-envs (``examples/pong.yaml``'s ``env``), whole
  ``sample()`` calls (batches cut, episode bookkeeping);
* ours/envpool: the same runner with ``vectorization: envpool`` (EnvPool's ``Pong-v5``);
* envpool: EnvPool's pool stepped bare with random actions: the ceiling.

Two tables: random actions (``sample(random_actions=True)``: what the sampler costs around
the env), then the default Nature CNN acting (torch, on this machine's device). Medians of
interleaved repeats, in one process. RLlib's env runner is not measured here (its venv,
``make bench-peer``, has no Atari packages). Both tables also go to
``out/bench/bench_atari.json`` (``--out``), with the machine, for ``python -m bench.plot_results``.

Usage: ``python -m bench.bench_atari [--seconds 3] [--repeats 3] [--envs 8 64]``
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import yaml

from bench.bench_sampling import rate
from bench.results import OUT, Table, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.sampling.env.wrappers import apply_wrappers, register_namespace

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pong.yaml"
FRAGMENT = 16
"""Steps per sub-env per sample() call: small, so a call at 64 envs takes about a second."""


def example_env(num_envs: int) -> dict[str, Any]:
    env: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())["spec"]["env"]
    return {**env, "numEnvs": num_envs}


def gym_sync(num_envs: int) -> Callable[[], int]:
    spec = RolloutJob.from_dict({"metadata": {"name": "b"}, "spec": {"env": example_env(num_envs)}}).spec.env
    assert spec.id is not None
    register_namespace(spec.id)
    env_id, config, wrappers = spec.id, dict(spec.config), list(spec.wrappers)
    env = gym.vector.SyncVectorEnv([lambda: apply_wrappers(gym.make(env_id, **config), wrappers)] * num_envs)
    env.reset(seed=0)
    return _random_steps(env, num_envs)


def envpool_bare(num_envs: int) -> Callable[[], int]:
    import envpool

    env = envpool.make("Pong-v5", env_type="gymnasium", num_envs=num_envs, seed=0, repeat_action_probability=0.25)
    env.reset()
    return _random_steps(env, num_envs)


def _random_steps(env: Any, num_envs: int) -> Callable[[], int]:
    n_actions = int(env.single_action_space.n)
    rng = np.random.default_rng(0)

    def step() -> int:
        for _ in range(FRAGMENT):
            env.step(rng.integers(0, n_actions, num_envs))
        return FRAGMENT * num_envs

    return step


def ours(num_envs: int, envpool: bool) -> EnvRunner:
    env = example_env(num_envs)
    if envpool:
        env = {
            "id": env["id"],
            "numEnvs": num_envs,
            "vectorization": "envpool",
            "config": {"repeat_action_probability": 0.25},
        }
    spec = {"env": env, "sampling": {"seed": 0, "rolloutFragmentLength": FRAGMENT}}
    return EnvRunner(RolloutJob.from_dict({"metadata": {"name": "bench"}, "spec": spec}))


def measure(runs: dict[str, Callable[[], int]], seconds: float, repeats: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(repeats):  # interleaved, so drift on a shared machine hits all alike
        for name, step in runs.items():
            samples[name].append(rate(step, seconds))
    return {k: statistics.median(v) for k, v in samples.items()}


COLUMNS = ["gym sync", "ours/gym", "ours/envpool", "envpool"]


def json_table(title: str, medians: list[tuple[int, dict[str, float]]], args: argparse.Namespace, device: str) -> Table:
    """One printed table as JSON rows: env steps/s per column, one row per sub-env count."""
    policy = f" (policy on {device})" if "acting" in title else ""
    heading = f"Atari, Pong, {title}{policy}: env steps/s, median of {args.repeats} x {args.seconds:g} s"
    return Table(heading, "envs", COLUMNS, rows=[{"envs": n, **{k: med[k] for k in COLUMNS}} for n, med in medians])


def row(n: int, med: dict[str, float]) -> str:
    return (
        f"{n:>5} {med['gym sync']:>10,.0f} {med['ours/gym']:>10,.0f} {med['ours/envpool']:>13,.0f}"
        f" {med['envpool']:>10,.0f} {med['ours/gym'] / med['gym sync']:>13.0%}"
        f" {med['ours/envpool'] / med['envpool']:>17.0%} {med['ours/envpool'] / med['ours/gym']:>16.1f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    header = (
        f"{'envs':>5} {'gym sync':>10} {'ours/gym':>10} {'ours/envpool':>13} {'envpool':>10}"
        f" {'ours/gym sync':>13} {'ours/envpool ceil':>17} {'ours envpool/gym':>17}"
    )
    tables: dict[str, list[str]] = {"random actions": [], "Nature CNN acting": []}
    medians: dict[str, list[tuple[int, dict[str, float]]]] = {title: [] for title in tables}
    device = ""
    for n in args.envs:
        bare = {"gym sync": gym_sync(n), "envpool": envpool_bare(n)}
        runners = {"ours/gym": ours(n, envpool=False), "ours/envpool": ours(n, envpool=True)}
        device = runners["ours/gym"].policy.device
        random = {k: (lambda r=r: len(r.sample(random_actions=True))) for k, r in runners.items()}
        acting = {k: (lambda r=r: len(r.sample())) for k, r in runners.items()}
        medians["random actions"].append((n, measure({**bare, **random}, args.seconds, args.repeats)))
        medians["Nature CNN acting"].append((n, measure({**bare, **acting}, args.seconds, args.repeats)))
        for title in tables:
            tables[title].append(row(*medians[title][-1]))
        for runner in runners.values():
            runner.close()
    print(f"Atari, Pong (4 frames per step, 84x84x4), env steps/s, median of {args.repeats} x {args.seconds}s "
          f"(pid {os.getpid()}, {os.cpu_count()} CPUs, policy on {device})")  # fmt: skip
    for title, lines in tables.items():
        print(f"-- {title}")
        print(header)
        print("\n".join(lines))
    results = [json_table(title, rows, args, device) for title, rows in medians.items()]
    write("bench_atari", results, machine(), args.out)


if __name__ == "__main__":
    main()

"""Multi-agent sampling throughput: agent steps/s on team tag with 2 policies, measured in one
run next to the bare env and the single-agent figure.

Rows (medians of interleaved repeats):

* bare: ``TeamTag`` sub-envs stepped in a Python loop with random actions (dicts built per
  step), no policy: the ceiling for any multi-agent sampler on this env;
* ours: ``MultiAgentEnvRunner`` on ``examples/multiagent.yaml`` (2 red + 2 blue, a third
  blue joining at step 10; policies ``red`` 64x64 and ``blue`` 32x32), full ``sample()``;
* single-agent: ``EnvRunner`` on CartPole-v1 with the default 64x64 MLP (as in
  ``bench_sampling.py``), env steps/s, for scale.

The table also goes to ``out/bench/bench_multiagent.json`` (``--out``), with the machine, for
``python -m bench.plot_results`` to draw.

Usage: ``python -m bench.bench_multiagent [--seconds 2] [--repeats 3] [--envs 1 8 64]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.results import OUT, Table, Value, machine, write
from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.examples.team_tag import TeamTag
from rolloutfleet.inference.cpu_threads import limit_cpu_threads
from rolloutfleet.sampling.heap import keep_freed_memory
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

MANIFEST = Path(__file__).resolve().parents[1] / "examples" / "multiagent.yaml"


def rate(step: Callable[[], tuple[int, int]], seconds: float) -> tuple[float, float]:
    """(agent steps/s, env steps/s)."""
    step()  # warm-up
    agents = envs = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        a, e = step()
        agents, envs = agents + a, envs + e
    return agents / elapsed, envs / elapsed


def tag_job(num_envs: int) -> RolloutJob:
    manifest = RolloutJob.from_file(MANIFEST).to_dict()
    manifest["spec"]["env"]["numEnvs"] = num_envs
    return RolloutJob.from_dict(manifest)


def bare(num_envs: int) -> Callable[[], tuple[int, int]]:
    config = dict(tag_job(num_envs).spec.env.config)
    envs = [TeamTag(config) for _ in range(num_envs)]
    obs = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    rng = np.random.default_rng(0)

    def step() -> tuple[int, int]:
        agent_steps = 0
        for _ in range(50):
            for j, env in enumerate(envs):
                actions = {agent: int(rng.integers(5)) for agent in obs[j]}
                agent_steps += len(actions)
                next_obs, _, terminated, truncated, _ = env.step(actions)
                obs[j] = {a: o for a, o in next_obs.items() if not (terminated.get(a) or truncated.get(a))}
                if not env.agents:
                    obs[j] = env.reset()[0]
        return agent_steps, 50 * num_envs

    return step


def ours(num_envs: int) -> Callable[[], tuple[int, int]]:
    runner = MultiAgentEnvRunner(tag_job(num_envs))

    def step() -> tuple[int, int]:
        batch = runner.sample()
        return batch.agent_steps(), batch.env_steps()

    return step


def single_agent(num_envs: int) -> Callable[[], tuple[int, int]]:
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "bench"},
            "spec": {"env": {"id": "CartPole-v1", "numEnvs": num_envs}, "sampling": {"seed": 0}},
        }
    )
    runner = EnvRunner(job)

    def step() -> tuple[int, int]:
        rows = len(runner.sample())
        return rows, rows

    return step


SERIES = ["bare agent steps/s", "ours agent steps/s", "ours env steps/s", "single-agent env steps/s"]


def table_row(n: int, agents: dict[str, float], envs: dict[str, float]) -> dict[str, Value]:
    """One row of the JSON table from the medians of one env count."""
    values = [agents["bare"], agents["ours"], envs["ours"], envs["single"]]
    return {"envs": n, **dict(zip(SERIES, values, strict=True))}


def main() -> None:
    limit_cpu_threads(1)  # numpy's BLAS threads, as in a worker process (policy.numThreads)
    keep_freed_memory()  # process-wide, as in a worker process
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    table = Table(
        f"multi-agent sampling, team tag (2 policies, 4-5 agents) next to single-agent CartPole: "
        f"median of {args.repeats} x {args.seconds:g} s",
        "envs",
        SERIES,
        unit="steps/s",
        log_y=True,
    )
    print(
        f"multi-agent sampling, team tag (2 policies, 4-5 agents), agent steps/s, median of {args.repeats} x "
        f"{args.seconds}s (pid {os.getpid()})"
    )
    print(
        f"{'envs':>5} {'bare agent/s':>13} {'ours agent/s':>13} {'ours env/s':>11} {'ours/bare':>10}"
        f" {'single-agent env/s':>19}"
    )
    for n in args.envs:
        runs = {"bare": bare(n), "ours": ours(n), "single": single_agent(n)}
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all alike
            for name, step in runs.items():
                samples[name].append(rate(step, args.seconds))
        agents = {k: statistics.median(a for a, _ in v) for k, v in samples.items()}
        envs = {k: statistics.median(e for _, e in v) for k, v in samples.items()}
        print(
            f"{n:>5} {agents['bare']:>13,.0f} {agents['ours']:>13,.0f} {envs['ours']:>11,.0f}"
            f" {agents['ours'] / agents['bare']:>9.0%} {envs['single']:>19,.0f}"
        )
        table.rows.append(table_row(n, agents, envs))
    write("bench_multiagent", [table], machine(), args.out)


if __name__ == "__main__":
    main()

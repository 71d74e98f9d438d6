"""External simulators: actions/s and round-trip latency vs number of clients, next to the
in-process runner on the same env (the ceiling), measured in one run.

For each client count N: one :class:`~rolloutfleet.external.runner.ExternalRunner` in this
process (its fragments drained by a thread, as a worker's loop would publish them) and N
simulators in separate processes (up to 8 processes, N/8 threads each), each stepping its own
CartPole-v1 and asking :class:`rolloutfleet.PolicyClient` for every action, with remote
inference (a round trip per action) and local (the client acts with pulled weights and ships
rows every 64 steps). Latency: ``get_action`` wall time as the simulator sees it. The ceiling:
:class:`~rolloutfleet.EnvRunner` stepping N CartPoles in-process with the same policy.

Usage: ``python -m bench.bench_external [--clients 1,8,64] [--inference remote,local] [--seconds 10]``;
``--client ADDRESS SECONDS THREADS OUT INFERENCE`` is the simulator process (internal). Both
tables (actions/s, latency) also go to ``out/bench/bench_external.json`` (``--out``), with the
machine, for ``python -m bench.plot_results`` to draw.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.results import OUT, Table, Value, machine, write
from rolloutfleet import EnvRunner, PolicyClient, RolloutJob
from rolloutfleet.external.runner import ExternalRunner
from rolloutfleet.spec.sections.external import PORT_VARIABLE

MAX_PROCESSES = 8


def job(num_envs: int, external: bool) -> RolloutJob:
    env: dict[str, object] = {"id": "CartPole-v1", "numEnvs": num_envs}
    if external:
        env = {"id": "CartPole-v1", "external": {"port": 9900, "maxClients": 1024}}
    return RolloutJob.from_dict(
        {"metadata": {"name": "bench"}, "spec": {"env": env, "sampling": {"rolloutFragmentLength": 200, "seed": 0}}}
    )


def client_process(address: str, seconds: float, threads: int, out: str, inference: str) -> None:
    """Simulators: ``threads`` CartPoles stepped until ``seconds`` pass; latencies written to ``out``."""
    import gymnasium as gym

    latencies: list[list[float]] = [[] for _ in range(threads)]
    start = time.monotonic()

    def simulate(i: int) -> None:
        env, client = gym.make("CartPole-v1"), PolicyClient(address, inference=inference)
        obs, _ = env.reset(seed=i)
        episode = client.start_episode()
        while time.monotonic() - start < seconds:
            began = time.perf_counter()
            action = client.get_action(episode, obs)
            latencies[i].append(time.perf_counter() - began)
            obs, reward, terminated, truncated, _ = env.step(action)
            client.log_returns(episode, float(reward))
            if terminated or truncated:
                client.end_episode(episode, obs, truncated=truncated)
                obs, _ = env.reset()
                episode = client.start_episode()
        client.close()

    workers = [threading.Thread(target=simulate, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    Path(out).write_text(json.dumps([x for part in latencies for x in part]))


def external(clients: int, seconds: float, inference: str) -> tuple[float, float, float, float]:
    """(actions/s, p50 ms, p99 ms, actions per forward pass) of ``clients`` simulators against one server."""
    os.environ[PORT_VARIABLE] = "0"
    runner = ExternalRunner(job(1, external=True), host="127.0.0.1")
    stop = threading.Event()

    def drain() -> None:  # what the worker loop does with fragments (publishing aside)
        while not stop.is_set():
            if len(runner.book.ready) >= 200:
                runner.sample()
            else:
                time.sleep(0.001)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    processes = min(clients, MAX_PROCESSES)
    with tempfile.TemporaryDirectory() as tmp:
        outs = [f"{tmp}/{p}.json" for p in range(processes)]
        shares = [clients // processes + (p < clients % processes) for p in range(processes)]
        command = [sys.executable, "-m", "bench.bench_external", "--client", f"127.0.0.1:{runner.port}", str(seconds)]
        procs = [
            subprocess.Popen([*command, str(share), out, inference]) for share, out in zip(shares, outs, strict=True)
        ]
        for proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"a simulator process exited with {proc.returncode}")
        latencies = np.array([x for out in outs for x in json.loads(Path(out).read_text())])
    stop.set()
    drainer.join()
    runner.close()
    per_pass = runner.server.acted / runner.server.passes if runner.server.passes else float("nan")
    p50, p99 = (float(np.percentile(latencies, q)) * 1e3 for q in (50, 99))
    return len(latencies) / seconds, p50, p99, per_pass


def ceiling(envs: int, seconds: float) -> float:
    """Env steps/s of the in-process runner stepping ``envs`` CartPoles with the same policy."""
    with EnvRunner(job(envs, external=False)) as runner:
        runner.sample()  # warm up
        steps, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            steps += len(runner.sample())
        return steps / (time.perf_counter() - started)


CEILING = "in-process runner (env steps/s)"
Measured = dict[tuple[str, int], tuple[float, float, float, float]]  # (inference, clients) -> rate, p50, p99, obs/pass


def tables(measured: Measured, tops: dict[int, float], seconds: float) -> list[Table]:
    """Actions/s per inference mode beside the in-process ceiling, and p50/p99 latency, per client count."""
    modes = list(dict.fromkeys(inference for inference, _ in measured))
    title = f"external simulators, CartPole-v1, MLP 64x64, {seconds:g} s each"
    rate = Table(f"{title}: actions/s", "clients", [*modes, CEILING], unit="steps/s", log_y=True)
    latency_series = [f"{mode} {q}" for mode in modes for q in ("p50", "p99")]
    latency = Table(f"{title}: get_action latency", "clients", latency_series, unit="ms", log_y=True)
    for clients, top in tops.items():
        rates: dict[str, Value] = {mode: measured[mode, clients][0] for mode in modes}
        rate.rows.append({"clients": clients, **rates, CEILING: top})
        times: dict[str, Value] = {}
        for mode in modes:
            times[f"{mode} p50"], times[f"{mode} p99"] = measured[mode, clients][1:3]
        latency.rows.append({"clients": clients, **times})
    return [rate, latency]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--inference", default="remote,local")
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    parser.add_argument("--client", nargs=5, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client is not None:
        address, seconds, threads, out, inference = args.client
        client_process(address, float(seconds), int(threads), out, inference)
        return
    print(f"\nExternal simulators, CartPole-v1, MLP 64x64; {os.cpu_count()} CPUs, {args.seconds:g} s each")
    counts = [int(c) for c in args.clients.split(",")]
    tops = {clients: ceiling(clients, args.seconds) for clients in counts}
    print(
        f"{'inference':>9} {'clients':>8} {'actions/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'obs/pass':>9} {'in-process runner':>18}"
    )
    measured: Measured = {}
    for inference in args.inference.split(","):
        for clients in counts:
            rate, p50, p99, per_pass = measured[inference, clients] = external(clients, args.seconds, inference)
            print(f"{inference:>9} {clients:>8} {rate:>10,.0f} {p50:>8.2f} {p99:>8.2f} {per_pass:>9.1f} "
                  f"{tops[clients]:>12,.0f} steps/s")  # fmt: skip
    write("bench_external", tables(measured, tops, args.seconds), machine(), args.out)


if __name__ == "__main__":
    main()

"""What a league costs: Redis memory per snapshot and how fast snapshots are written and
loaded, for policies of a few sizes, against a real ``redis-server``; and a worker whose
opponent changes every episode among those snapshots, next to the same job against one
fixed opponent (env steps/s, snapshot loads/s, its RSS while sampling).

Each snapshot is a policy of the given parameter count (float32 tensors, as the default MLP
holds them), written through :class:`rolloutfleet.league.store.PolicyStore` (content
-addressed, one blob and one metadata field each). Memory is Redis's own ``used_memory``
before and after, divided by the snapshots written; the ceiling of the write and load rates
is a bare ``SET`` / ``GET`` of the same payload by the same client.

The switching worker is the real multi-agent runner on ``examples/tictactoe.yaml`` with
``spec.league`` (its opponent's seats held in ``--cached`` slots) and a uniform plan over
every snapshot, fed by the real :class:`~rolloutfleet.league.opponents.LeagueOpponents`:
its sampling loop alone. Then the same two jobs as whole ``rolloutfleet worker`` processes
(``--worker-cached`` slots), publishing to the redis-server (``dropOldest``: no learner to
wait for), their rate read from each worker's own ``rolloutfleet_env_steps_total``.

Usage: ``python -m bench.bench_league [--snapshots 500] [--params 10000,100000,1000000]``
(``make bench-league``). JSON in ``out/bench/bench_league.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from bench.results import Table, machine, write
from rolloutfleet.data.codec import encode_tensors
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.league.opponents import LeagueOpponents
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.sampling.heap import keep_freed_memory
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.spec.job import RolloutJob

ROOT = Path(__file__).resolve().parents[1]


def policy(params: int, seed: int) -> dict[str, np.ndarray]:
    """``params`` float32 values named as the default MLP's: a policy layer and head, a value
    layer and head, half each (so the store keeps what acting needs as its own part)."""
    rng = np.random.default_rng(seed)
    width = max(1, int((params / 2) ** 0.5))
    rest = max(0, params - 2 * width * width)
    return {
        "actor_trunk.1.weight": rng.standard_normal((width, width)).astype(np.float32),
        "critic_trunk.1.weight": rng.standard_normal((width, width)).astype(np.float32),
        "pi.bias": rng.standard_normal(rest // 2).astype(np.float32),
        "vf.bias": rng.standard_normal(rest - rest // 2).astype(np.float32),
    }


def run(params: int, snapshots: int) -> dict[str, float]:
    with EmbeddedRedis() as server:
        url = server.url
        store = PolicyStore(url, "league")
        client = store.client
        weights = [policy(params, seed) for seed in range(snapshots)]
        before = int(client.info("memory")["used_memory"])
        t0 = time.perf_counter()
        for i, state in enumerate(weights):
            store.snapshot(f"main-{i:05d}", state, step=i)
        write_s = time.perf_counter() - t0
        after = int(client.info("memory")["used_memory"])
        names = [f"main-{i:05d}" for i in range(snapshots)]
        t0 = time.perf_counter()
        for name in names:
            store.load(name)
        load_s = time.perf_counter() - t0
        known = {snap.name: snap for snap in store.snapshots()}  # as a worker under its plan: one round trip
        per_load = {}
        for acting in (False, True):
            t0 = time.perf_counter()
            for name in names:
                store.load_many([name], known, acting=acting)
            per_load[acting] = time.perf_counter() - t0
        payload = bytes(encode_tensors(weights[0]))
        t0 = time.perf_counter()
        for i in range(snapshots):
            client.set(f"bare:{i}", payload)
        bare_set_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(snapshots):
            client.get(f"bare:{i}")
        bare_get_s = time.perf_counter() - t0
        sizes = [s.size for s in store.snapshots()]
        store.close()
    return {
        "params": params,
        "snapshot_bytes": statistics.median(sizes),
        "redis_bytes_per_snapshot": (after - before) / snapshots,
        "writes_per_s": snapshots / write_s,
        "loads_per_s": snapshots / load_s,
        "known_loads_per_s": snapshots / per_load[False],
        "acting_loads_per_s": snapshots / per_load[True],
        "bare_sets_per_s": snapshots / bare_set_s,
        "bare_gets_per_s": snapshots / bare_get_s,
    }


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


GAMES = {"tictactoe": "pettingzoo.classic.tictactoe_v3", "connect_four": "pettingzoo.classic.connect_four_v3"}


def tictactoe(league: bool, cached: int, game: str = "tictactoe") -> RolloutJob:
    """``examples/tictactoe.yaml`` (16 envs), or the same job on another PettingZoo classic game."""
    manifest = RolloutJob.from_file(ROOT / "examples/tictactoe.yaml").to_dict()
    manifest["spec"]["env"]["id"] = GAMES[game]
    if league:
        manifest["spec"]["league"] = {"opponent": "main_v1", "cachedPolicies": cached, "planRefreshSeconds": 3600}
    return RolloutJob.from_dict(manifest)


def steps_per_s(runner: MultiAgentEnvRunner, seconds: float) -> float:
    runner.sample()  # warm
    steps, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        steps += runner.sample().env_steps()
    return steps / (time.perf_counter() - began)


def filled_league(url: str, snapshots: int, game: str) -> PolicyStore:
    """The job ``league``'s store at ``url`` with ``snapshots`` of the opponent's model and a
    uniform plan over them."""
    store = PolicyStore(url, "league")
    base = MultiAgentEnvRunner(tictactoe(False, 1, game)).get_weights(["main_v1"])["main_v1"]
    for i in range(snapshots):
        store.snapshot(f"s{i:04d}", {k: v * (1 + i / snapshots) for k, v in base.items()}, step=i)
    store.publish_plan({f"s{i:04d}": 1.0 for i in range(snapshots)})
    return store


def switching(snapshots: int, cached: int, seconds: float, repeats: int, game: str = "tictactoe") -> dict[str, Any]:
    """A worker whose opponent changes every episode among ``snapshots`` (uniform plan), next
    to the same job against one fixed opponent: env steps/s, snapshot loads/s, RSS."""
    with EmbeddedRedis() as server:
        store = filled_league(server.url, snapshots, game)
        used_memory = int(store.client.info("memory")["used_memory"])
        fixed_rates, league_rates, loads, reads, sent, rss, busy = [], [], [], [], [], [], []
        for _ in range(repeats):
            with MultiAgentEnvRunner(tictactoe(False, cached, game)) as runner:
                fixed_rates.append(steps_per_s(runner, seconds))
            job = tictactoe(True, cached, game)
            with MultiAgentEnvRunner(job) as runner:
                assert job.spec.league is not None
                signature = runner.policies[job.spec.league.opponent].weights_signature()
                opponents = LeagueOpponents(store, job.spec.league, seed=0, worker_index=0, signature=signature,
                                            acting=runner.slots_act_only())  # fmt: skip
                runner.attach_league(opponents)
                before = rss_mb()
                league_rates.append(steps_per_s(runner, seconds))
                loads.append(opponents.loads / seconds)
                reads.append(opponents.reads / seconds)
                sent.append(opponents.sent_ahead / seconds)
                assert runner.slots is not None
                busy.append(runner.slots.busy / max(1, runner.slots.assigned))
                rss.append(rss_mb() - before)
                opponents.pending.clear()
        store.close()
    return {
        "game": game,
        "snapshots": snapshots,
        "cached": cached,
        "fixed_steps_per_s": statistics.median(fixed_rates),
        "league_steps_per_s": statistics.median(league_rates),
        "loads_per_s": statistics.median(loads),
        "reads_per_s": statistics.median(reads),
        "sent_ahead_per_s": statistics.median(sent),
        "rss_growth_mb": max(rss),
        "busy_share": statistics.median(busy),
        "redis_used_mb": used_memory / 2**20,
    }


def published_steps(port: int) -> float | None:
    """A worker's ``rolloutfleet_env_steps_total`` from its metrics endpoint (None: not up yet)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rolloutfleet_env_steps_total":
                return float(sample.value)
    return None


def worker_rate(job: RolloutJob, redis_url: str, seconds: float, warm_s: float = 3.0) -> float:
    """Env steps/s a ``rolloutfleet worker`` process of ``job`` publishes, over ``seconds``
    once it has published for ``warm_s``."""
    port = free_port()
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=port)
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": os.devnull}
    worker = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not published_steps(port):
            if worker.poll() is not None or time.monotonic() > deadline:
                worker.terminate()
                raise RuntimeError(f"the worker did not publish: {worker.communicate(timeout=60)[1][-2000:]}")
            time.sleep(0.2)
        time.sleep(warm_s)
        first, began = published_steps(port), time.perf_counter()
        time.sleep(seconds)
        last, ended = published_steps(port), time.perf_counter()
        if first is None or last is None:
            raise RuntimeError("the worker's metrics went away while measured")
        return (last - first) / (ended - began)
    finally:
        worker.terminate()
        worker.communicate(timeout=60)


def whole_workers(snapshots: int, cached: int, seconds: float, repeats: int, game: str) -> dict[str, Any]:
    """:func:`switching`'s two jobs as worker processes publishing to Redis: env steps/s."""
    with EmbeddedRedis() as server:
        filled_league(server.url, snapshots, game).close()
        fixed, league = [], []
        for _ in range(repeats):
            for rates, job in ((fixed, tictactoe(False, cached, game)), (league, tictactoe(True, cached, game))):
                manifest = job.to_dict()
                manifest["metadata"] = {"name": "league"}
                manifest["spec"]["replicas"] = 1
                manifest["spec"]["redis"] = {"backpressure": "dropOldest", "maxLen": 1000}
                rates.append(worker_rate(RolloutJob.from_dict(manifest), server.url, seconds))
    return {
        "game": game,
        "cached": cached,
        "fixed_steps_per_s": statistics.median(fixed),
        "league_steps_per_s": statistics.median(league),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", type=int, default=500)
    parser.add_argument("--params", default="10000,100000,1000000", help="parameters of a policy, comma-separated")
    parser.add_argument(
        "--cached", default="2,8,16", help="spec.league.cachedPolicies of the switching worker, comma-separated"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling time of each switching run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--games", default="tictactoe,connect_four", help=f"games of the switching worker, of {', '.join(GAMES)}"
    )
    parser.add_argument("--no-store", action="store_true", help="skip the store's table (writes, loads, memory)")
    parser.add_argument(
        "--worker-cached", default="16", help="cachedPolicies of the worker-process runs, comma-separated ('' for none)"
    )
    args = parser.parse_args()
    keep_freed_memory()  # as a worker process does (rolloutfleet worker): freed snapshots' pages stay mapped
    where = machine()
    results = [] if args.no_store else [run(int(p), args.snapshots) for p in args.params.split(",")]
    print(f"# A league's store: {args.snapshots} snapshots a size ({where['cores']} cores, {where['date']})\n")
    print(
        "| parameters | a snapshot | Redis memory a snapshot | writes/s (bare SET) | loads/s (bare GET) "
        "| loads/s, metadata known: whole / acting part |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    table = Table("League store", "params", ["writes_per_s", "loads_per_s"], unit="snapshots/s")
    for r in results:
        print(f"| {r['params']:,.0f} | {r['snapshot_bytes'] / 1024:,.1f} KiB | {r['redis_bytes_per_snapshot'] / 1024:,.1f} KiB "
              f"| {r['writes_per_s']:,.0f} ({r['bare_sets_per_s']:,.0f}) | {r['loads_per_s']:,.0f} ({r['bare_gets_per_s']:,.0f}) "
              f"| {r['known_loads_per_s']:,.0f} / {r['acting_loads_per_s']:,.0f} |")  # fmt: skip
        table.rows.append({key: round(value, 1) for key, value in r.items()})
    rows = [
        switching(args.snapshots, int(k), args.seconds, args.repeats, game)
        for game in args.games.split(",")
        for k in args.cached.split(",")
    ]
    print(f"\n# A worker switching opponents every episode among {args.snapshots} snapshots, a uniform plan "
          f"(16 envs, medians of {args.repeats} runs of {args.seconds:g} s)\n")  # fmt: skip
    print(
        "| game | cachedPolicies | env steps/s against one fixed opponent | against the league | ratio | snapshot loads/s (requests sent ahead/s, reads waited for/s) | "
        "episodes given a held snapshot (all slots in play) | worker RSS growth while sampling | Redis used_memory |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    switch = Table("League: switching opponents", "cached", ["fixed_steps_per_s", "league_steps_per_s"])
    for sw in rows:
        print(f"| {sw['game']} | {sw['cached']} | {sw['fixed_steps_per_s']:,.0f} | {sw['league_steps_per_s']:,.0f} | "
              f"{sw['league_steps_per_s'] / sw['fixed_steps_per_s']:.2f} | {sw['loads_per_s']:,.1f} ({sw['sent_ahead_per_s']:,.1f}, {sw['reads_per_s']:,.1f}) | "
              f"{sw['busy_share']:.1%} | {sw['rss_growth_mb']:+.1f} MB | {sw['redis_used_mb']:,.1f} MB |")  # fmt: skip
        switch.rows.append({key: round(value, 2) if isinstance(value, float) else value for key, value in sw.items()})
    whole = [
        whole_workers(args.snapshots, int(k), args.seconds, args.repeats, game)
        for game in args.games.split(",")
        for k in filter(None, args.worker_cached.split(","))
    ]
    if whole:
        print(f"\n# The same jobs as rolloutfleet worker processes publishing to Redis (dropOldest; medians of "
              f"{args.repeats} runs of {args.seconds:g} s, rolloutfleet_env_steps_total)\n")  # fmt: skip
        print("| game | cachedPolicies | env steps/s published, one fixed opponent | against the league | ratio |")
        print("| --- | --- | --- | --- | --- |")
    workers = Table(
        "League: switching opponents, worker processes", "cached", ["fixed_steps_per_s", "league_steps_per_s"]
    )
    for w in whole:
        print(f"| {w['game']} | {w['cached']} | {w['fixed_steps_per_s']:,.0f} | {w['league_steps_per_s']:,.0f} | "
              f"{w['league_steps_per_s'] / w['fixed_steps_per_s']:.2f} |")  # fmt: skip
        workers.rows.append({key: round(value, 2) if isinstance(value, float) else value for key, value in w.items()})
    write("bench_league", [table, switch, *([workers] if whole else [])], where)


if __name__ == "__main__":
    main()

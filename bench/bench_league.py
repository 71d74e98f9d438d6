"""What a league's store costs Redis: memory per snapshot, and how fast snapshots are
written and loaded, for policies of a few sizes, against a real ``redis-server``.

Each snapshot is a policy of the given parameter count (float32 tensors, as the default MLP
holds them), written through :class:`rolloutfleet.league.store.PolicyStore` (content
-addressed, one blob and one metadata field each). Memory is Redis's own ``used_memory``
before and after, divided by the snapshots written; the ceiling of the write and load rates
is a bare ``SET`` / ``GET`` of the same payload by the same client.

Usage: ``python -m bench.bench_league [--snapshots 500] [--params 10000,100000,1000000]``
(``make bench-league``). JSON in ``out/bench/bench_league.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bench.results import Table, machine, write
from rolloutfleet.data.codec import encode_tensors
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.league.store import PolicyStore


def policy(params: int, seed: int) -> dict[str, np.ndarray]:
    """Two layers and their biases holding ``params`` float32 values in all."""
    rng = np.random.default_rng(seed)
    width = max(1, int((params / 2) ** 0.5))
    rest = max(0, params - 2 * width * width)
    return {
        "pi.0.weight": rng.standard_normal((width, width)).astype(np.float32),
        "pi.1.weight": rng.standard_normal((width, width)).astype(np.float32),
        "pi.1.bias": rng.standard_normal(rest).astype(np.float32),
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
        "bare_sets_per_s": snapshots / bare_set_s,
        "bare_gets_per_s": snapshots / bare_get_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", type=int, default=500)
    parser.add_argument("--params", default="10000,100000,1000000", help="parameters of a policy, comma-separated")
    args = parser.parse_args()
    where = machine()
    results = [run(int(p), args.snapshots) for p in args.params.split(",")]
    print(f"# A league's store: {args.snapshots} snapshots a size ({where['cores']} cores, {where['date']})\n")
    print("| parameters | a snapshot | Redis memory a snapshot | writes/s (bare SET) | loads/s (bare GET) |")
    print("| --- | --- | --- | --- | --- |")
    table = Table("League store", "params", ["writes_per_s", "loads_per_s"], unit="snapshots/s")
    for r in results:
        print(f"| {r['params']:,.0f} | {r['snapshot_bytes'] / 1024:,.1f} KiB | {r['redis_bytes_per_snapshot'] / 1024:,.1f} KiB "
              f"| {r['writes_per_s']:,.0f} ({r['bare_sets_per_s']:,.0f}) | {r['loads_per_s']:,.0f} ({r['bare_gets_per_s']:,.0f}) |")  # fmt: skip
        table.rows.append({key: round(value, 1) for key, value in r.items()})
    write("bench_league", [table], where)


if __name__ == "__main__":
    main()

"""The data plane on a Redis Cluster: aggregate end-to-end MB/s with 1 and 3 shards, next to
the raw ceiling of the same topology, measured in one run, and the shards a fleet needs.

A local cluster of 3 masters (no replicas: a replica doubles every write's CPU, and this
bench is about what the masters move) on loopback. Producers and consumers are separate
processes: 3 producers (worker index 0-2: with 3 shards one per shard, with 1 all on it)
publishing flat out with ``block`` backpressure, and 2 consumers of one group, each reading
every shard and acking. The raw ceiling is the same topology with bare redis-py and the
same payload bytes: XADD on the shard master's own client (waiting while 150 entries are
undelivered), XREADGROUP + XACK of every stream read the way BatchConsumer reads them. Medians of 3 repeats, interleaved.

On a machine with few cores the figure cannot scale with shards: every master, producer
and consumer shares the same cores, so the 3-shard row says what sharding costs (more
round trips per read) more than what it gains; on separate machines each master adds its
own core. The capacity table uses the 1-shard figure (what one master moves when it has a
core to itself, here shared with the clients: a lower bound).

Both tables also go to ``out/bench/bench_cluster.json`` (``--out``), with the machine.
Usage: ``python -m bench.bench_cluster [--quick] [--seconds 3]`` (``make bench-cluster``)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import os
import statistics
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import redis

from bench.bench_transport import atari_batch, cartpole_batch, nbytes
from bench.results import OUT, Table, machine, write
from rolloutfleet.data.codec import encode
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.connection import connect, node_client
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.redis_cluster import LocalCluster

REPEATS = 3
PRODUCERS = 3
CONSUMERS = 2
BATCHES = {"CartPole 2048 rows": cartpole_batch, "Atari 32x84x84x4 uint8": atari_batch}
WORKER_STEPS_PER_S = {"CartPole 2048 rows": 100_000, "Atari 32x84x84x4 uint8": 2_000}
"""Env steps/s of one worker for the capacity table (CartPole: a 64-env worker does ~530 K
delivered, docs/benchmarks.md; 100 K is a modest one. Atari: ~2 K frames/s of a CPU worker)."""


def produce_ours(url: str, job: str, kind: str, shards: int, stop: Event, index: int) -> None:
    batch = BATCHES[kind]()
    publisher = BatchPublisher(url, job, max_len=200, backpressure="block", block_timeout_s=600,
                               worker_index=index, shards=shards)  # fmt: skip
    while not stop.is_set():
        publisher.publish(batch, worker_index=index)


def produce_raw(url: str, job: str, kind: str, shards: int, stop: Event, index: int) -> None:
    payload = encode(BATCHES[kind]())
    key = job_keys("default", job).shard(index % shards, shards).batches
    client = node_client(connect(url), key)  # the master's own client, as BatchPublisher's
    while not stop.is_set():
        # Bare backpressure: each XADD reads the group's lag in the same round trip and
        # waits while 150 entries are undelivered (without it the producers flood the
        # cores the consumers need, and MAXLEN trims entries nobody read).
        pipe = client.pipeline(transaction=False)
        pipe.xadd(key, {"payload": payload, "worker_index": index}, maxlen=200, approximate=True)
        pipe.xinfo_groups(key)
        _, groups = pipe.execute()
        while groups and max(int(g.get("lag") or 0) for g in groups) >= 150 and not stop.is_set():
            time.sleep(0.002)
            groups = client.xinfo_groups(key)


def consume_ours(url: str, job: str, kind: str, shards: int, seconds: float, results: Any) -> None:
    consumer = BatchConsumer(url, job, group="bench", block_s=0.1, start="$", shards=shards)
    consumer.ack(consumer.read(count=16, timeout=5))  # warm: producers are running
    row_bytes = nbytes(BATCHES[kind]()) / len(next(iter(BATCHES[kind]().values())))
    rows, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        messages = consumer.read(count=16, timeout=1)
        rows += sum(len(m.batch) for m in messages)
        consumer.ack(messages)
    results.put((rows * row_bytes, elapsed))


def consume_raw(url: str, job: str, kind: str, shards: int, seconds: float, results: Any) -> None:
    client = connect(url)
    keys = [k.batches for k in job_keys("default", job).all_shards(shards)]
    for key in keys:
        with contextlib.suppress(redis.ResponseError):
            client.xgroup_create(key, "bench", id="$", mkstream=True)
    data_bytes = nbytes(BATCHES[kind]())
    consumer = f"c{os.getpid()}"

    turn = 0

    def poll(streams: list[str], block: int | None) -> int:
        pipe = client.pipeline(transaction=False)
        for key in streams:
            pipe.xreadgroup("bench", consumer, {key: ">"}, count=16, block=block)
        acks = client.pipeline(transaction=False)
        got = 0
        for key, reply in zip(streams, pipe.execute(), strict=True):
            ids = [entry_id for _, items in reply or [] for entry_id, _ in items]
            if ids:
                acks.xack(key, "bench", *ids)
            got += len(ids)
        acks.execute()
        return got

    def read() -> int:
        # As BatchConsumer reads: one stream blocks; several get a look each, then a short block.
        nonlocal turn
        if len(keys) == 1:
            return poll(keys, 1000)
        got = poll(keys, None)
        if not got:
            turn = (turn + 1) % len(keys)
            got = poll([keys[turn]], 50)
        return got

    read()
    entries, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        entries += read()
    results.put((entries * data_bytes, elapsed))


def end_to_end(cluster: LocalCluster, kind: str, shards: int, ours: bool, seconds: float, run: int) -> float:
    """Aggregate MB/s of column data delivered to the consumers."""
    job = f"bench-{run}"  # a fresh job (fresh streams) per measurement
    context = mp.get_context("fork")
    stop, results = context.Event(), context.Queue()
    produce, consume = (produce_ours, consume_ours) if ours else (produce_raw, consume_raw)
    producers = [context.Process(target=produce, args=(cluster.url, job, kind, shards, stop, i), daemon=True)
                 for i in range(PRODUCERS)]  # fmt: skip
    consumers = [context.Process(target=consume, args=(cluster.url, job, kind, shards, seconds, results), daemon=True)
                 for _ in range(CONSUMERS)]  # fmt: skip
    for process in consumers + producers:
        process.start()
    try:
        totals = [results.get(timeout=seconds + 60) for _ in consumers]
    finally:
        stop.set()
        for process in producers + consumers:
            process.join(10)
            if process.is_alive():
                process.terminate()
    return sum(size for size, _ in totals) / max(elapsed for _, elapsed in totals) / 1e6


def flush(cluster: LocalCluster) -> None:
    client = connect(cluster.url)
    client.flushall()  # every master (redis-py sends FLUSHALL to all primaries)
    client.close()


OURS, RAW = "ours", "raw redis-py"  # BatchPublisher -> BatchConsumer; the raw ceiling


def tables(measured: dict[tuple[str, int], tuple[float, float]], shards_needed: dict[str, int], seconds: float,
           repeats: int) -> list[Table]:  # fmt: skip
    """MB/s per (batch, shards), ours beside the raw ceiling; the shards 100 workers need per batch."""
    title = f"Redis Cluster, 3 masters, {PRODUCERS} producers, {CONSUMERS} consumers"
    heading = (
        f"{title}: BatchPublisher -> BatchConsumer (ours) and the raw ceiling, MB/s, {seconds:g} s, median of {repeats}"
    )
    rate = Table(heading, "batch, shards", [OURS, RAW], unit="MB/s")
    rate.rows = [{"batch, shards": f"{kind.split()[0]}, {shards} shard{'s' * (shards > 1)}", OURS: ours, RAW: raw}
                 for (kind, shards), (ours, raw) in measured.items()]  # fmt: skip
    sizing = Table(f"{title}: shards per 100 workers, from the 1-shard figure", "batch", ["shards"], unit="shards")
    sizing.rows = [{"batch": kind, "shards": shards} for kind, shards in shards_needed.items()]
    return [rate, sizing]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs, one repeat (a smoke test)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement (default 3, quick 1)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"repeats per figure (default {REPEATS})")
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    repeats = 1 if args.quick else args.repeats
    load = os.getloadavg()[0]
    print(f"# RolloutFleet on a Redis Cluster ({os.cpu_count()} cores, load average {load:.1f} before the run; "
          f"3 masters, {PRODUCERS} producer and {CONSUMERS} consumer processes; {seconds:g} s per measurement, "
          f"median of {repeats})\n")  # fmt: skip
    print("| batch | shards | BatchPublisher -> BatchConsumer MB/s | raw ceiling MB/s | ours / raw |")
    print("| --- | --- | --- | --- | --- |")
    per_shard: dict[str, float] = {}
    measured: dict[tuple[str, int], tuple[float, float]] = {}
    run = 0
    with LocalCluster(masters=3, replicas=0) as cluster:
        for kind in BATCHES:
            for shards in (1, 3):
                ours: list[float] = []
                raw: list[float] = []
                for _ in range(repeats):  # interleaved: drifting load hits both alike
                    for is_ours, figures in ((True, ours), (False, raw)):
                        flush(cluster)
                        run += 1
                        figures.append(end_to_end(cluster, kind, shards, is_ours, seconds, run))
                mine, ceiling = measured[kind, shards] = statistics.median(ours), statistics.median(raw)
                if shards == 1:
                    per_shard[kind] = mine
                print(f"| {kind} | {shards} | {mine:,.0f} | {ceiling:,.0f} | {mine / ceiling:.0%} |")
    print("\n## shards per 100 workers (from the 1-shard figure above)\n")
    print("| batch | row | worker rate (assumed) | 100 workers | per shard (measured) | shards |")
    print("| --- | --- | --- | --- | --- | --- |")
    shards_needed: dict[str, int] = {}
    for kind, make in BATCHES.items():
        batch = make()
        row = nbytes(batch) / len(next(iter(batch.values())))
        need = 100 * WORKER_STEPS_PER_S[kind] * row / 1e6
        shards_needed[kind] = math.ceil(need / per_shard[kind])
        print(f"| {kind} | {row:,.0f} B | {WORKER_STEPS_PER_S[kind]:,} steps/s | {need:,.0f} MB/s | "
              f"{per_shard[kind]:,.0f} MB/s | {shards_needed[kind]} |")  # fmt: skip
    write("bench_cluster", tables(measured, shards_needed, seconds, repeats), machine(), args.out)


if __name__ == "__main__":
    main()

"""Transport throughput: our codec and Redis data plane next to the ceilings, in one run.

* codec: encode / decode MB/s of a CartPole-like fragment (2048 rows, every RLlib column)
  and of an Atari-like one (32 rows of 84x84x4 uint8 obs + new_obs), next to pickle
  protocol 5 (a local speed reference only: pickle never goes on the wire);
* end to end: 2 producer processes publishing flat out + 1 consumer reading and acking, as
  BatchPublisher/BatchConsumer, next to the raw ceiling of the same topology (bare redis-py
  XADD / XREADGROUP + XACK of an equally large opaque payload; its XADDs trim, so what its
  consumer is too slow for is dropped), a lossless raw pipeline (bare producers waiting at
  1 000 unconsumed entries, the consumer deleting what it acked), the raw ceiling with the
  codec added (each XADD a fresh encode, each entry read decoded: the least any pipeline of
  typed batches does) and redis-benchmark's SET of that size (the C client: what the server
  sustains); with each path's CPU per consumed entry, Redis's, the producers' and the
  consumer's (where a path's time goes: on a host with fewer free cores than processes, MB/s
  follows the sum);
* weights: publish -> every one of N polling subscribers holding the decoded weights, for
  1 MB and 100 MB.

Medians of 3 repeats; ratios are computed within this run (the machines are noisy). The
tables also go to ``out/bench/bench_transport.json`` (``--out``), with the machine, for
``python -m bench.plot_results`` to draw.
Usage: ``python -m bench.bench_transport [--quick] [--seconds 2]``
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import pickle
import re
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any, cast

import numpy as np
import redis

from bench.results import OUT, Table, Value, machine, write
from rolloutfleet.data.codec import decode, encode
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.weights import WeightPublisher, WeightSubscriber

REPEATS = 3
JOB = "bench"


def cartpole_batch(rows: int = 2048) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((rows, 4)).astype(np.float32),
        "new_obs": rng.standard_normal((rows, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, rows),
        "rewards": np.ones(rows, np.float32),
        "terminateds": rng.random(rows) < 0.02,
        "truncateds": np.zeros(rows, bool),
        "eps_id": rng.integers(0, 1 << 40, rows),
        "env_id": np.arange(rows, dtype=np.int32) % 64,
        "agent_index": np.zeros(rows, np.int32),
        "t": np.arange(rows, dtype=np.int32),
        "action_logp": rng.standard_normal(rows).astype(np.float32),
        "action_dist_inputs": rng.standard_normal((rows, 2)).astype(np.float32),
        "vf_preds": rng.standard_normal(rows).astype(np.float32),
        "weights_seq_no": np.zeros(rows, np.int64),
    }


def atari_batch(rows: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    # Atari-like frames: a textured, mostly static background and a few moving sprites
    # (lz4 ~2x, zstd ~3x, as measured on real Atari frames; pure noise would not compress).
    background = (rng.integers(0, 4, (84, 84)) * 30 + 40).astype(np.uint8)
    background[60:, :] = 87
    frames = np.repeat(background[None, :, :, None], rows + 4, axis=0).repeat(4, axis=3)
    noise = rng.random(frames.shape) < 0.15
    frames[noise] = rng.integers(0, 255, int(noise.sum()), dtype=np.uint8)
    for i in range(rows + 4):
        y, x = rng.integers(0, 70, 2)
        frames[i, y : y + 10, x : x + 6, :] = 200
    stacked = np.stack([frames[i : i + 4, :, :, 0].transpose(1, 2, 0) for i in range(rows + 1)])
    return {
        "obs": stacked[:-1].copy(),
        "new_obs": stacked[1:].copy(),
        "actions": rng.integers(0, 6, rows),
        "rewards": np.zeros(rows, np.float32),
        "terminateds": np.zeros(rows, bool),
    }


def nbytes(batch: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in batch.values())


def median_rate(work: Callable[[], Any], size: int, seconds: float) -> float:
    """Median over REPEATS of MB/s of calling ``work`` (each call handles ``size`` bytes)."""
    rates = []
    for _ in range(REPEATS):
        work()
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            work()
            calls += 1
        rates.append(calls * size / elapsed / 1e6)
    return statistics.median(rates)


def bench_codec(seconds: float) -> list[Table]:
    codec = Table(
        "codec: MB/s of column data, median of 3", "batch", ["encode", "decode", "pickle 5 dumps", "pickle 5 loads"],
        unit="MB/s", log_y=True,
    )  # fmt: skip
    compressed = Table("codec, Atari batch compressed: MB/s of column data", "compression", ["encode", "decode"],
                       unit="MB/s")  # fmt: skip
    print("\n## codec (MB/s of column data; median of 3)\n")
    print("| batch | size | encode | decode (zero-copy) | pickle 5 dumps | pickle 5 loads | decode / pickle loads |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, batch in (("CartPole 2048 rows", cartpole_batch()), ("Atari 32x84x84x4 uint8", atari_batch())):
        size = nbytes(batch)
        payload = encode(batch)
        pickled = pickle.dumps(batch, protocol=5)
        enc = median_rate(lambda b=batch: encode(b), size, seconds)
        dec = median_rate(lambda p=payload: decode(p), size, seconds)
        pdump = median_rate(lambda b=batch: pickle.dumps(b, protocol=5), size, seconds)
        pload = median_rate(lambda p=pickled: pickle.loads(p), size, seconds)
        print(
            f"| {name} | {size / 1e3:,.0f} KB | {enc:,.0f} | {dec:,.0f} | {pdump:,.0f} | {pload:,.0f} | {dec / pload:.1f}x |"
        )
        codec.rows.append({"batch": name, "bytes": size, "encode": enc, "decode": dec, "pickle 5 dumps": pdump,
                           "pickle 5 loads": pload})  # fmt: skip
    batch = atari_batch()
    size = nbytes(batch)
    print("\n| Atari, compressed | ratio | encode MB/s | decode MB/s |\n| --- | --- | --- | --- |")
    for compression in ("lz4", "zstd"):
        payload = encode(batch, compression=compression)  # type: ignore[arg-type]
        enc = median_rate(lambda c=compression: encode(batch, compression=c), size, seconds)  # type: ignore[misc]
        dec = median_rate(lambda p=payload: decode(p), size, seconds)
        print(f"| {compression} | {size / len(payload):.1f}x | {enc:,.0f} | {dec:,.0f} |")
        compressed.rows.append({"compression": compression, "ratio": size / len(payload), "encode": enc, "decode": dec})
    return [codec, compressed]


# -- end to end ------------------------------------------------------------------------


def produce_ours(url: str, stop: Event, index: int) -> None:
    batch = cartpole_batch()
    publisher = BatchPublisher(url, JOB, max_len=1000, backpressure="block", block_timeout_s=600)
    while not stop.is_set():
        publisher.publish(batch, worker_index=index)


def produce_raw(url: str, stop: Event, index: int) -> None:
    payload = encode(cartpole_batch())  # same bytes on the wire, no per-call encode
    client = redis.Redis.from_url(url)
    key = f"raw:{JOB}"
    while not stop.is_set():
        client.xadd(key, {"payload": payload, "worker_index": index}, maxlen=1000, approximate=True)


def produce_raw_codec(url: str, stop: Event, index: int) -> None:
    """The ceiling's producer, encoding the batch for each XADD as a publish does."""
    batch = cartpole_batch()
    client = redis.Redis.from_url(url)
    key = f"raw-codec:{JOB}"
    while not stop.is_set():
        client.xadd(key, {"payload": encode(batch), "worker_index": index}, maxlen=1000, approximate=True)


def produce_raw_lossless(url: str, stop: Event, index: int) -> None:
    """The ceiling's producer, but it loses nothing: no trimming (the consumer deletes what it
    acked), and it waits while ``max_len`` (1 000) entries are unconsumed, as ``block`` does."""
    payload = encode(cartpole_batch())
    client = redis.Redis.from_url(url)
    key = f"raw-lossless:{JOB}"
    pipe = client.pipeline(transaction=False)
    while not stop.is_set():
        pipe.xadd(key, {"payload": payload, "worker_index": index})
        pipe.xlen(key)
        _, length = pipe.execute()
        while length >= 1000 and not stop.is_set():
            time.sleep(0.001)
            length = client.xlen(key)


def consume_ours(url: str, seconds: float) -> tuple[float, float]:
    consumer = BatchConsumer(url, JOB, group="bench", block_s=0.1, start="$")
    consumer.ack(consumer.read(count=16, timeout=5))  # warm: producers are running
    row_bytes = nbytes(cartpole_batch(1))
    rows = 0
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        messages = consumer.read(count=16, timeout=1)
        rows += sum(len(m.batch) for m in messages)
        consumer.ack(messages)
    consumer.close()
    return rows * row_bytes / elapsed / 1e6, rows / elapsed


def consume_raw(url: str, seconds: float, path: str = "raw") -> tuple[float, float]:
    """The bare consumer of ``path``'s stream (``raw-codec``: it decodes each entry)."""
    client = redis.Redis.from_url(url)
    key, lossless = f"{path}:{JOB}", path == "raw-lossless"
    with contextlib.suppress(redis.ResponseError):
        # Lossless: from the stream's start, as its producers count every entry not yet deleted.
        client.xgroup_create(key, "bench", id="0" if lossless else "$", mkstream=True)
    rows_per_entry = 2048
    data_bytes = nbytes(cartpole_batch())
    entries = 0

    def read() -> int:
        reply = client.xreadgroup("bench", "c", {key: ">"}, count=16, block=1000)
        ids = [entry_id for _, items in reply or [] for entry_id, _ in items]
        if path == "raw-codec":
            for _, items in reply or []:
                for _, fields in items:
                    decode(fields[b"payload"])
        if ids and lossless:  # acked and deleted in one round trip: the stream holds what is unconsumed
            pipe = client.pipeline(transaction=False)
            pipe.xack(key, "bench", *ids)
            pipe.xdel(key, *ids)
            pipe.execute()
        elif ids:
            client.xack(key, "bench", *ids)
        return len(ids)

    read()
    start = time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        entries += read()
    client.close()
    return entries * data_bytes / elapsed / 1e6, entries * rows_per_entry / elapsed


PATHS: dict[str, tuple[Callable[[str, Event, int], None], Callable[[str, float], tuple[float, float]]]] = {
    "ours": (produce_ours, consume_ours),
    "raw": (produce_raw, consume_raw),
    "raw-lossless": (produce_raw_lossless, lambda url, seconds: consume_raw(url, seconds, "raw-lossless")),
    "raw-codec": (produce_raw_codec, lambda url, seconds: consume_raw(url, seconds, "raw-codec")),
}


CPU_SIDES = ("Redis", "producers", "consumer")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used (Linux: ``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def redis_cpu_seconds(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


@dataclass
class Run:
    """One end-to-end measurement: the consumer's MB/s and rows/s, and the CPU microseconds
    each side spent per entry it consumed (``CPU_SIDES``)."""

    mb: float
    rows: float
    cpu_us: dict[str, float]


def per_entry(
    cpu_s: dict[str, float], rows_per_s: float, seconds: float, rows_per_entry: int = 2048
) -> dict[str, float]:
    """CPU seconds spent over ``seconds`` -> microseconds per entry consumed at ``rows_per_s``."""
    entries = rows_per_s * seconds / rows_per_entry
    return {side: used / entries * 1e6 if entries else float("nan") for side, used in cpu_s.items()}


def end_to_end(url: str, path: str, seconds: float) -> Run:
    """What the consumer of ``path`` (a key of :data:`PATHS`) got, and the CPU it took."""
    client = redis.Redis.from_url(url)
    client.flushall()
    context = mp.get_context("fork")
    stop = context.Event()
    produce, consume = PATHS[path]
    producers = [context.Process(target=produce, args=(url, stop, i), daemon=True) for i in range(2)]
    for process in producers:
        process.start()
    time.sleep(0.3)

    def used() -> dict[str, float]:
        producing = sum(cpu_seconds(cast(int, p.pid)) for p in producers)
        return {"Redis": redis_cpu_seconds(client), "producers": producing, "consumer": time.process_time()}

    try:
        before, started = used(), time.perf_counter()
        mb, rows = consume(url, seconds)
        after, wall = used(), time.perf_counter() - started
        # Over the consumer's whole call (its setup too: ~1 % of the window).
        return Run(mb, rows, per_entry({side: after[side] - before[side] for side in CPU_SIDES}, rows, wall))
    finally:
        stop.set()
        for process in producers:
            process.join(10)
            if process.is_alive():
                process.terminate()
        client.close()


def redis_benchmark_set(port: int, size: int, quick: bool) -> float | None:
    """MB/s of SETs of ``size`` bytes from redis-benchmark (C client, 2 connections)."""
    requests = 2000 if quick else 5000
    try:
        out = subprocess.run(
            ["redis-benchmark", "-p", str(port), "-t", "set", "-d", str(size), "-n", str(requests), "-c", "2", "-q"],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"SET: ([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(match.group(1)) * size / 1e6 if match else None


LABELS = {
    "ours": "BatchPublisher -> BatchConsumer",
    "raw": "raw redis-py (XADD trims)",
    "raw-lossless": "raw redis-py, lossless",
    "raw-codec": "raw redis-py + codec",
}


def cpu_table(runs: dict[str, list[Run]]) -> Table:
    """Each path's median CPU microseconds per consumed entry, by side, and their sum."""
    print("\n## end to end: CPU microseconds per consumed entry, medians\n")
    print("| path | Redis | producers (both) | consumer | total |\n| --- | --- | --- | --- | --- |")
    table = Table(
        f"end to end: CPU per consumed entry, median of {REPEATS}", "path", list(CPU_SIDES), unit="us per entry"
    )
    for path, results in runs.items():
        row: dict[str, Value] = {"path": LABELS[path]}
        row |= {side: statistics.median(r.cpu_us[side] for r in results) for side in CPU_SIDES}
        row["total"] = statistics.median(sum(r.cpu_us.values()) for r in results)
        print(f"| {LABELS[path]} | " + " | ".join(f"{cast(float, row[k]):,.0f}" for k in (*CPU_SIDES, "total")) + " |")
        table.rows.append(row)
    return table


def bench_end_to_end(server: EmbeddedRedis, seconds: float, quick: bool) -> tuple[Table, dict[str, list[Run]]]:
    """The MB/s table, and the runs (for :func:`cpu_table`, printed last so that the tables
    before it keep their place for ``bench.compare`` of an older tree)."""
    batch = cartpole_batch()
    wire = len(encode(batch))
    print(f"\n## end to end: 2 producer processes + 1 consumer, {wire / 1e3:,.0f} KB entries (2048 CartPole rows)\n")
    runs: dict[str, list[Run]] = {path: [] for path in PATHS}
    # Unmeasured: the first ~1 000 entries a fresh Redis holds cost it page faults (the trimming
    # ceiling's first round ran at ~60 % of the next ones); the other paths hold far fewer.
    end_to_end(server.url, "raw", min(seconds, 1.0))
    for _ in range(REPEATS):  # interleaved, so drifting machine load hits all alike
        for path, results in runs.items():
            results.append(end_to_end(server.url, path, seconds))
    mb = {path: statistics.median(r.mb for r in results) for path, results in runs.items()}
    rows = {path: statistics.median(r.rows for r in results) for path, results in runs.items()}
    c_ceiling = redis_benchmark_set(server.port, wire, quick)
    print(
        "| path | MB/s | env steps/s | vs raw ceiling | vs lossless raw | vs raw + codec |\n| --- | --- | --- | --- | --- | --- |"
    )
    labels = {
        "ours": "BatchPublisher -> BatchConsumer (encode, XADD+backpressure, decode, ack)",
        "raw": "raw ceiling: bare redis-py XADD (trims to ~1 000: drops what the consumer is too slow for) "
        "-> XREADGROUP + XACK, same payload",
        "raw-lossless": "lossless raw: bare XADD + XLEN, waiting at 1 000 unconsumed -> XREADGROUP + XACK + XDEL",
        "raw-codec": "raw + codec: the raw ceiling, each XADD a fresh encode, each entry read decoded "
        "(the least a pipeline of typed batches does)",
    }
    for path, label in labels.items():
        print(f"| {label} | {mb[path]:,.0f} | {rows[path]:,.0f} | {mb[path] / mb['raw']:.0%} | "
              f"{mb[path] / mb['raw-lossless']:.0%} | {mb[path] / mb['raw-codec']:.0%} |")  # fmt: skip
    if c_ceiling is not None:
        print(f"| redis-benchmark SET -d {wire} -c 2 (C client, writes only) | {c_ceiling:,.0f} | - | - | - | - |")
    table = Table(
        f"end to end: 2 producer processes + 1 consumer, {wire / 1e3:,.0f} KB entries (2048 CartPole rows), "
        f"median of {REPEATS}",
        "path",
        ["MB/s"],
        unit="MB/s",
    )
    table.rows = [{"path": LABELS[path], "MB/s": mb[path], "env steps/s": rows[path]} for path in PATHS]
    table.rows.append({"path": "redis-benchmark SET (writes only)", "MB/s": c_ceiling, "env steps/s": None})
    return table, runs


# -- weights ---------------------------------------------------------------------------


def subscribe(url: str, ready: Any, results: Any, stop: Event) -> None:
    subscriber = WeightSubscriber(url, JOB)
    ready.put(True)
    while not stop.is_set():
        update = subscriber.poll()
        if update is not None:
            results.put((update.seq_no, time.monotonic()))
        else:
            time.sleep(0.001)


def bench_weights(server: EmbeddedRedis, subscribers: int) -> Table:
    print(f"\n## weights: publish -> all {subscribers} subscribers (1 ms polling) hold the decoded version\n")
    print("| size | latency (median of 3) | per-subscriber download + decode bound |\n| --- | --- | --- |")
    context = mp.get_context("fork")
    table = Table(
        f"weights: publish -> all {subscribers} subscribers hold the decoded version, median of 3",
        "size",
        ["latency"],
        unit="ms",
        log_y=True,
    )
    for label, elements in (("1 MB", 1 << 18), ("100 MB", 25 << 20)):
        redis.Redis.from_url(server.url).flushall()
        stop, ready, results = context.Event(), context.Queue(), context.Queue()
        procs = [context.Process(target=subscribe, args=(server.url, ready, results, stop), daemon=True)
                 for _ in range(subscribers)]  # fmt: skip
        for process in procs:
            process.start()
        for _ in procs:
            ready.get(timeout=30)
        publisher = WeightPublisher(server.url, JOB)
        latencies = []
        for version in range(REPEATS):
            weights = {"w": np.full(elements, version, np.float32)}
            started = time.monotonic()
            seq = publisher.publish(weights)
            done = [results.get(timeout=120) for _ in procs]
            assert all(s == seq for s, _ in done), done
            latencies.append(max(t for _, t in done) - started)
        stop.set()
        for process in procs:
            process.join(10)
        publisher.close()
        median = statistics.median(latencies)
        print(f"| {label} | {median * 1e3:,.1f} ms | {elements * 4 * subscribers / median / 1e6:,.0f} MB/s served |")
        table.rows.append({"size": label, "latency": median * 1e3, "subscribers": subscribers})
    return table


def main() -> None:
    global REPEATS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test of the bench)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per measurement (default 2, quick 0.5)")
    parser.add_argument("--subscribers", type=int, default=4)
    parser.add_argument("--out", type=Path, default=OUT, help="where the results' JSON goes")
    args = parser.parse_args()
    seconds = args.seconds or (0.4 if args.quick else 2.0)
    print(f"# RolloutFleet transport bench ({'quick, ' if args.quick else ''}{seconds:g} s per measurement)")
    tables = bench_codec(seconds / 4)
    with EmbeddedRedis() as server:
        end_to_end_table, runs = bench_end_to_end(server, seconds, args.quick)
        tables += [end_to_end_table, bench_weights(server, 2 if args.quick else args.subscribers), cpu_table(runs)]
    write("bench_transport", tables, machine(quick=args.quick, seconds_per_measurement=seconds), args.out)


if __name__ == "__main__":
    main()

"""The data plane at fleet scale, measured with hollow workers (as Kubernetes measures its
control plane with kubemark's hollow nodes): what 10, 100 and 1 000 workers cost one Redis
and what the learner gets.

A hollow worker is the real worker transport (:class:`~rolloutfleet.fleet.worker_transport.WorkerTransport`:
its publisher with ``block`` backpressure and the wait for room or for a learner, its
weights subscriber, its heartbeats, its declared columns and filter sync) driven by the
worker's loop (load newer weights, publish, heartbeat), with sampling replaced by a
pre-built batch at a chosen rate. Many share a process, one thread each, each with its
own connections, as separate pods would have; the fleet is spread over child processes of
at most 2 500 workers (5 000 connections: a process's file descriptors are limited, 20 000
on the machine this was written on), and the learner runs in the bench's own process.
Against one real ``redis-server`` and a real ``BatchConsumer`` learner, per fleet size, in
phases:

1. **waiting**: no learner, the stream full: what a waiting worker costs Redis (commands
   and CPU a second, by Redis's own ``INFO commandstats`` and ``INFO cpu``, less the CPU of
   an idle Redis measured first), its connections and the memory Redis holds for it (the
   stream's 256 entries included);
2. **a learner comes**: the time until it has a batch from every worker (p50, p99, max);
3. **the learner keeps up**: its rows/s (of what the fleet offers: N x 200 rows a second),
   and what a publishing worker costs Redis;
4. **a weights version**: a 1 MB version published; the time until every worker loaded it
   (p50, p99, max) and the bytes Redis sent for it, next to the bound N x size;
5. **the operator's read**: the time of the heartbeat read its status tick makes (one
   HGETALL of every worker's heartbeat), and Redis's own time for it (``SLOWLOG``).

Results as a table and as JSON (``out/bench/bench_dataplane.json``).
Usage: ``python -m bench.bench_dataplane [--sizes 10,100,1000] [--seconds 20]``
(``make bench-dataplane``). Each hollow worker holds 2 connections (its publisher's, which
its weights downloads and heartbeats share, and its subscription to the weights
announcements), both on the one redis-server; with read replicas (``--replicas``) the
subscription is on a replica. So 10 000 workers on one redis-server need 20 000 of its
file descriptors, more than a hard limit of 20 000 leaves it; with replicas they need 10 000
on the primary. A fleet offers at most 1 000 fragments a second (200 000 rows: what the
2-core machine's learner takes), so a worker of a fleet of 10 000 publishes one every 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import redis

from bench.results import Table, machine, write
from rolloutfleet.data.batch import DEFAULT_POLICY, SampleBatch
from rolloutfleet.data.weights_check import check_weights
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.fleet.worker import HEARTBEAT_EVERY_S
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import read_heartbeats
from rolloutfleet.transport.publisher import BackpressureTimeout, PublishInterrupted
from rolloutfleet.transport.redis.connection import RETRYABLE, connect
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.redis_cluster import LocalCluster

JOB = "hollow"
ROWS = 200
"""Rows of a hollow worker's batch: a CartPole fragment (obs 4 float32 and the usual columns)."""
FRAGMENTS_PER_S = 1.0
"""A hollow worker's rate: one fragment a second (a modest CPU worker's 200 steps/s)..."""
FLEET_FRAGMENTS_PER_S = 1_000.0
"""...as long as the fleet offers at most this many (200 000 rows a second: what one learner
takes on the 2-core machine); a bigger fleet's workers publish less often each."""
PROCESS_WORKERS = 2_500
"""Hollow workers a child process holds: 5 000 connections, well inside a process's file
descriptors."""
START_WAVE = 50
"""Hollow workers of a process that start (connect, record their model, read the filters) at once."""
FD_RESERVED = 32
"""File descriptors Redis keeps for itself out of its limit (``maxclients`` is lowered to fit)."""
MAX_LEN = 256
WEIGHTS_BYTES = 1 << 20
CLUSTER_MASTERS = 3


def manifest_of(
    workers: int, max_len: int = MAX_LEN, shards: int = 1, read_replicas: list[str] | None = None
) -> dict[str, Any]:
    redis_spec = {"maxLen": max_len, "backpressure": "block", "blockTimeoutSeconds": 3600, "shards": shards,
                  "readReplicas": read_replicas or []}  # fmt: skip
    return {
        "metadata": {"name": JOB, "namespace": "default"},
        "spec": {"replicas": workers, "env": {"id": "CartPole-v1"}, "redis": redis_spec},
    }


def fragments_per_s(workers: int) -> float:
    """A hollow worker's rate in a fleet of ``workers``: :data:`FRAGMENTS_PER_S`, or less where the
    fleet would offer more than :data:`FLEET_FRAGMENTS_PER_S`."""
    return min(FRAGMENTS_PER_S, FLEET_FRAGMENTS_PER_S / workers)


def fragment(rows: int, worker: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(worker)
    return {
        "obs": rng.standard_normal((rows, 4), dtype=np.float32),
        "new_obs": rng.standard_normal((rows, 4), dtype=np.float32),
        "actions": rng.integers(0, 2, rows),
        "rewards": np.ones(rows, np.float32),
        "terminateds": np.zeros(rows, bool),
        "truncateds": np.zeros(rows, bool),
        "eps_id": np.full(rows, worker, np.int64),
        "env_id": np.zeros(rows, np.int32),
        "t": np.arange(rows, dtype=np.int32),
        "action_logp": np.zeros(rows, np.float32),
        "vf_preds": np.zeros(rows, np.float32),
        "weights_seq_no": np.zeros(rows, np.int64),
    }


class HollowRunner:
    """What :class:`WorkerTransport` asks of a runner; its weights are checked against the
    model's signature as a real policy's are, and when each version was loaded is kept."""

    def __init__(self, weights_bytes: int) -> None:
        self.signature = {"pi": ((weights_bytes // 4,), np.dtype(np.float32))}
        self.policies = {DEFAULT_POLICY: self}
        self.filters: dict[str, Any] = {}
        self.weights_seq_nos = {DEFAULT_POLICY: 0}
        self.loaded_at: dict[int, float] = {}

    def weights_signature(self) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
        return dict(self.signature)

    def set_weights(self, policy: str, weights: Any, seq_no: int) -> bool:
        check_weights(weights, self.signature)
        self.weights_seq_nos[policy] = seq_no
        self.loaded_at[seq_no] = time.monotonic()
        return True

    def set_global_step(self, step: int) -> None:  # pragma: no cover - no schedule in this job
        pass


class HollowWorker(threading.Thread):
    """The worker's loop over the real transport, sampling replaced by a pre-built batch."""

    def __init__(self, url: str, job: RolloutJob, index: int, workers: int, stop: threading.Event) -> None:
        super().__init__(daemon=True, name=f"hollow-{index}")
        self.config = WorkerConfig(job=job, worker_index=index, num_workers=workers, redis_url=url)
        self.runner = HollowRunner(WEIGHTS_BYTES)
        self.columns = fragment(ROWS, index)
        self.stop, self.index, self.rate = stop, index, fragments_per_s(workers)
        self.waiting = threading.Event()
        self.started_up = threading.Event()
        self.transport: WorkerTransport | None = None
        self.published = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            transport = self.transport = WorkerTransport(self.config)
            transport.on_wait(lambda stream, load, waited: self.waiting.set())
            transport.record_models(self.runner)  # type: ignore[arg-type]
            transport.pull_filters(self.runner)  # type: ignore[arg-type]
            self.started_up.set()
            # Pods are not in step: each starts its fragments at its own phase of the second.
            self.stop.wait(self.index * 0.618034 % 1.0 / self.rate)
            while not self.stop.is_set():
                self._fragment(transport)
            transport.close()
        except BaseException as exc:  # noqa: BLE001 (the bench says which worker died and why)
            self.error = exc
            self.started_up.set()

    def _fragment(self, transport: WorkerTransport) -> None:
        began = time.monotonic()
        try:
            transport.load_weights(self.runner)  # type: ignore[arg-type]
            transport.publish(SampleBatch(self.columns))
            self.waiting.clear()
            self.published += 1
            stats = {"env_steps": self.published * ROWS, "steps_per_s": ROWS * self.rate}
            transport.heartbeat(stats, every_s=HEARTBEAT_EVERY_S)
        except (BackpressureTimeout, PublishInterrupted):
            return
        except RETRYABLE:
            self.stop.wait(0.5)
            return
        self.stop.wait(max(0.0, 1 / self.rate - (time.monotonic() - began)))


def _serve_fleet(url: str, manifest: dict[str, Any], indices: Sequence[int], workers: int, control: Connection) -> None:
    """A child process's share of the fleet, started in waves, answering the bench over ``control``."""
    threading.stack_size(512 * 1024)  # thousands of threads: their stacks' address space
    job, stop = RolloutJob.from_dict(manifest), threading.Event()
    fleet = [HollowWorker(url, job, index, workers, stop) for index in indices]

    def start() -> None:
        """A wave at a time, as an operator creates pods: thousands of threads connecting at
        once spend the process on handing its lock around (2 500 took over 10 minutes)."""
        for first in range(0, len(fleet), START_WAVE):
            wave = fleet[first : first + START_WAVE]
            for worker in wave:
                if not stop.is_set():
                    worker.start()
            for worker in wave:
                worker.started_up.wait(60)

    starter = threading.Thread(target=start, daemon=True, name="starter")
    starter.start()
    while True:
        request, *args = control.recv()
        if request == "status":
            errors = [f"hollow worker {w.index}: {w.error!r}" for w in fleet if w.error is not None]
            control.send({"started": sum(w.started_up.is_set() for w in fleet), "errors": errors[:3],
                          "waiting": sum(w.waiting.is_set() for w in fleet)})  # fmt: skip
        elif request == "loaded":
            control.send([w.runner.loaded_at.get(args[0]) for w in fleet])
        else:  # stop
            stop.set()
            starter.join(60)
            for worker in fleet:
                if worker.transport is not None:
                    worker.transport.interrupt()
            deadline = time.monotonic() + 30
            for worker in fleet:
                if worker.is_alive():
                    worker.join(max(0.0, deadline - time.monotonic()))
            control.send(None)
            return


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the name: field 3 on
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


class HollowFleet:
    """``workers`` hollow workers in child processes of at most :data:`PROCESS_WORKERS` each
    (their connections count against each process's file descriptors, as a pod's are its
    own); the bench asks them over pipes whether they started, wait, or loaded a version."""

    def __init__(self, url: str, manifest: dict[str, Any], workers: int) -> None:
        self.workers = workers
        context = multiprocessing.get_context("spawn")  # no copy of the bench's threads or locks
        self.pipes: list[Connection] = []
        self.processes: list[Any] = []
        for first in range(0, workers, PROCESS_WORKERS):
            ours, theirs = context.Pipe()
            indices = range(first, min(workers, first + PROCESS_WORKERS))
            process = context.Process(
                target=_serve_fleet, args=(url, manifest, indices, workers, theirs), daemon=True, name=f"hollow-{first}"
            )
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)

    def _ask(self, *request: Any) -> list[Any]:
        for pipe in self.pipes:
            pipe.send(request)
        return [pipe.recv() for pipe in self.pipes]

    def status(self) -> dict[str, Any]:
        answers = self._ask("status")
        return {
            "started": sum(a["started"] for a in answers),
            "waiting": sum(a["waiting"] for a in answers),
            "errors": [e for a in answers for e in a["errors"]],
        }

    def loaded(self, seq: int) -> list[float | None]:
        """When each worker loaded weights version ``seq`` (``time.monotonic``, one clock for
        every process of the machine), None where it has not."""
        return [at for answer in self._ask("loaded", seq) for at in answer]

    def cpu_s(self) -> float:
        """CPU seconds the fleet's processes have used so far (its Python: the workers' code)."""
        return sum(process_cpu_s(process.pid) for process in self.processes if process.is_alive())

    def stop(self) -> None:
        for pipe, process in zip(self.pipes, self.processes, strict=True):
            if process.is_alive():
                pipe.send(("stop",))
        for pipe, process in zip(self.pipes, self.processes, strict=True):
            if process.is_alive() and pipe.poll(60):
                pipe.recv()
            process.join(10)
            if process.is_alive():
                process.terminate()


class Learner(threading.Thread):
    """A real ``BatchConsumer`` reading as fast as it can; when each worker's first batch came."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True, name="learner")
        self.consumer = BatchConsumer(url, JOB, block_s=0.2)
        self.stop = threading.Event()
        self.started = time.monotonic()
        self.first: dict[int, float] = {}
        self.rows = 0

    def run(self) -> None:
        while not self.stop.is_set():
            messages = self.consumer.read(count=64, timeout=0.5)
            now = time.monotonic()
            for message in messages:
                self.rows += len(message.batch)
                self.first.setdefault(message.metadata.worker_index, now - self.started)
            self.consumer.ack(messages)
        self.consumer.close()


class RedisCounters:
    """Redis's own counters, read before and after a phase: summed over every node (one, or
    each master of a Redis Cluster), with each node's CPU kept apart (the busiest shard)."""

    def __init__(self, urls: list[str]) -> None:
        self.clients = [redis.Redis.from_url(url) for url in urls]

    def reset(self) -> tuple[list[float], int, int, float]:
        for client in self.clients:
            client.config_resetstat()
        return self._cpus(), self._net_out(), self._net_out("total_net_repl_output_bytes"), time.monotonic()

    def since(self, start: tuple[list[float], int, int, float]) -> dict[str, Any]:
        cpus0, out0, repl0, t0 = start
        commands: dict[str, int] = {}
        calls_by_node = []
        for client in self.clients:
            calls = 0
            for name, values in client.info("commandstats").items():
                if name not in ("cmdstat_config|resetstat", "cmdstat_info"):
                    key = name.removeprefix("cmdstat_")
                    commands[key] = commands.get(key, 0) + int(values["calls"])
                    calls += int(values["calls"])
            calls_by_node.append(calls)
        per_node = [now - before for now, before in zip(self._cpus(), cpus0, strict=True)]
        return {
            "seconds": time.monotonic() - t0,
            "cpu_s": sum(per_node),
            "cpu_s_by_node": per_node,
            "calls_by_node": calls_by_node,
            "net_out": self._net_out() - out0,
            "repl_out": self._net_out("total_net_repl_output_bytes") - repl0,
            "commands": commands,
        }

    def memory_and_clients(self) -> tuple[int, int]:
        memory = sum(int(client.info("memory")["used_memory"]) for client in self.clients)
        return memory, sum(int(client.info("clients")["connected_clients"]) for client in self.clients)

    def _net_out(self, counter: str = "total_net_output_bytes") -> int:
        """Bytes sent: to clients (Redis 7 counts its replicas apart, ``total_net_repl_output_bytes``)."""
        return sum(int(client.info("stats").get(counter, 0)) for client in self.clients)

    def _cpus(self) -> list[float]:
        return [
            float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]) for cpu in (c.info("cpu") for c in self.clients)
        ]


def raw_fanout(url: str, key: str, copies: int, threads: int = 8) -> float:
    """The ceiling of a version's fan-out on this machine: seconds for ``threads`` bare redis-py
    clients in this process to GET ``key`` (the version's chunk) ``copies`` times in all, the
    same N x size out of the same Redis, with no worker loop, no check and no decoding."""
    clients = [connect(url) for _ in range(threads)]
    share = [copies // threads + (i < copies % threads) for i in range(threads)]

    def fetch(client: Any, count: int) -> None:
        for _ in range(count):
            client.get(key)

    pool = [threading.Thread(target=fetch, args=(c, n)) for c, n in zip(clients, share, strict=True)]
    began = time.monotonic()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.monotonic() - began
    for client in clients:
        client.close()
    return elapsed


SLOWLOG_US = 100
"""Redis logs each command that took longer than this (its own time, ``SLOWLOG``)."""


@contextlib.contextmanager
def slowlog(url: str | None, slower_than_us: int) -> Iterator[list[tuple[list[bytes], int]]]:
    """The commands that took Redis more than ``slower_than_us`` of its own time while the
    block ran: (the command's words, microseconds), from its ``SLOWLOG`` (``url`` None: not
    read, a Redis Cluster)."""
    found: list[tuple[list[bytes], int]] = []
    if url is None:
        yield found
        return
    client = redis.Redis.from_url(url)
    before = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    client.slowlog_reset()
    client.config_set("slowlog-log-slower-than", slower_than_us)
    try:
        yield found
    finally:
        client.config_set("slowlog-log-slower-than", before)
        found.extend(
            (entry["command"].split(b" ") if isinstance(entry["command"], bytes) else [], int(entry["duration"]))
            for entry in client.slowlog_get(128)
        )
        client.close()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.05)
    return time.monotonic() - started


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def run_size(
    workers: int,
    seconds: float,
    max_len: int = MAX_LEN,
    weights: bool = True,
    cluster: bool = False,
    replicas: int = 0,
) -> dict[str, Any]:
    """Every phase for a fleet of ``workers`` hollow workers on a fresh redis-server, or with
    ``cluster`` a fresh 3-master Redis Cluster and the job's stream in 3 shards (``max_len``:
    the stream's, which the fleet fills before it waits; ``weights``: run the weights phase,
    whose N downloads and checks all happen on this machine; ``replicas``: read replicas
    of the redis-server that serve the weights, ``spec.redis.readReplicas``)."""
    followers: list[EmbeddedRedis] = []
    if cluster:
        server: Any = LocalCluster(masters=CLUSTER_MASTERS, replicas=0).start()
        urls = [node.url for node in server.nodes]
    else:
        limit = ("--maxclients", str(max(10_000, 3 * workers + 100)))
        server = EmbeddedRedis(extra_args=limit).start()
        urls = [server.url]
        for _ in range(replicas):
            followers.append(EmbeddedRedis(extra_args=(*limit, "--replicaof", "127.0.0.1", str(server.port))).start())
        for follower in followers:
            link = lambda f=follower: redis.Redis.from_url(f.url).info("replication")["master_link_status"] == "up"  # noqa: E731
            wait_for(link, 60, "the replica's link to the primary")
    counters = RedisCounters(urls)
    replica_counters = RedisCounters([f.url for f in followers]) if followers else None
    mark = counters.reset()
    time.sleep(min(seconds, 5.0))
    idle = counters.since(mark)  # Redis's own background work (serverCron), counted apart
    memory_before, clients_before = counters.memory_and_clients()
    shards = CLUSTER_MASTERS if cluster else 1
    manifest = manifest_of(workers, max_len, shards, [f.url for f in followers])
    job = RolloutJob.from_dict(manifest)
    result: dict[str, Any] = {"workers": workers, "redis_idle_cpu_s_per_s": idle["cpu_s"] / idle["seconds"],
                              "nodes": len(urls), "replicas": replicas,
                              "fragments_per_s": fragments_per_s(workers)}  # fmt: skip
    started = time.monotonic()
    fleet = HollowFleet(server.url, manifest, workers)
    try:

        def up() -> bool:
            status = fleet.status()
            if status["errors"]:
                raise RuntimeError(f"hollow workers failed to start: {status['errors']}")
            return bool(status["started"] == workers)

        wait_for(up, 300 + workers / 10, "every hollow worker started")
        result["start_s"] = time.monotonic() - started

        # 1. waiting: no learner, the stream full.
        wait_for(lambda: fleet.status()["waiting"] == workers, 120 + workers / 10, "every worker waiting")
        time.sleep(3)
        mark, fleet_cpu = counters.reset(), fleet.cpu_s()
        time.sleep(seconds)
        waiting = counters.since(mark)
        waiting["fleet_cpu_s"] = fleet.cpu_s() - fleet_cpu
        memory, clients = counters.memory_and_clients()
        result["waiting"] = waiting
        result["memory_per_worker"] = (memory - memory_before) / workers
        result["connections_per_worker"] = (clients - clients_before) / workers

        # 2. a learner comes.
        learner = Learner(server.url)
        learner.start()
        wait_for(lambda: len(learner.first) == workers, 120 + workers / 20, "a batch from every worker")
        resume = list(learner.first.values())
        result["resume_s"] = {"p50": percentile(resume, 0.5), "p99": percentile(resume, 0.99), "max": max(resume)}

        # 3. the learner keeps up.
        time.sleep(2)
        rows0, mark, fleet_cpu = learner.rows, counters.reset(), fleet.cpu_s()
        time.sleep(seconds)
        flowing = counters.since(mark)
        flowing["fleet_cpu_s"] = fleet.cpu_s() - fleet_cpu
        flowing["rows_per_s"] = (learner.rows - rows0) / flowing["seconds"]
        result["flowing"] = flowing

        # 4. a weights version (workers load it between fragments).
        if weights:
            result["weights"] = weights_phase(server.url, counters, fleet, replica_counters)

        # 5. the operator's heartbeat read (one HGETALL): its time, and Redis's own for it.
        reads, beats = [], {}
        with slowlog(server.url if not cluster else None, SLOWLOG_US) as redis_times:
            for _ in range(5):
                began = time.monotonic()
                beats = read_heartbeats(server.url, job)
                reads.append(time.monotonic() - began)
        key = job_keys("default", JOB).heartbeats.encode()
        theirs = [us for command, us in redis_times if command[:2] == [b"HGETALL", key]]
        result["heartbeat_read_s"] = statistics.median(reads)
        result["heartbeat_redis_us"] = statistics.median(theirs) if theirs else None
        result["heartbeats"] = len(beats)
        learner.stop.set()
        learner.join(30)
    finally:
        fleet.stop()
        if cluster:
            server.close()
        else:
            server.stop()
        for follower in followers:
            follower.stop()
    return result


def weights_phase(
    url: str, counters: RedisCounters, fleet: HollowFleet, replicas: RedisCounters | None = None
) -> dict[str, Any]:
    """A 1 MB version published: when each worker loaded it, the bytes Redis sent (the
    primary's to clients and to its replicas, the replicas' to clients), and the same N
    downloads by bare GETs from the primary (the ceiling)."""
    mark = counters.reset()
    replica_mark = None if replicas is None else replicas.reset()
    publisher = WeightPublisher(url, JOB)
    published_at = time.monotonic()
    seq = publisher.publish({"pi": np.zeros(WEIGHTS_BYTES // 4, np.float32)})
    loaded: list[float | None] = []

    def everywhere() -> bool:
        nonlocal loaded
        loaded = fleet.loaded(seq)
        return all(at is not None for at in loaded)

    wait_for(everywhere, 300, f"weights version {seq} everywhere")
    reached = [at - published_at for at in loaded if at is not None]
    sent = counters.since(mark)
    replicas_sent = None if replicas is None or replica_mark is None else replicas.since(replica_mark)
    publisher.close()
    return {
        "p50": percentile(reached, 0.5), "p99": percentile(reached, 0.99), "max": max(reached),
        # Redis 7.0 counts what it sends its replicas in total_net_output_bytes too: taken out.
        "net_out": sent["net_out"] - sent["repl_out"], "bound": fleet.workers * WEIGHTS_BYTES, "repl_out": sent["repl_out"],
        "replicas_net_out": 0 if replicas_sent is None else replicas_sent["net_out"],
        "raw_s": raw_fanout(url, job_keys("default", JOB).weights_chunk(seq, 0), fleet.workers),
    }  # fmt: skip


def per_worker_s(result: dict[str, Any], phase: str) -> tuple[float, float]:
    """Commands and Redis CPU (us) a second, per worker, Redis's CPU with no client
    (its background work, measured first) taken out."""
    measured, workers = result[phase], result["workers"]
    calls = sum(measured["commands"].values())
    cpu_s_per_s = measured["cpu_s"] / measured["seconds"] - result["redis_idle_cpu_s_per_s"]
    return calls / workers / measured["seconds"], max(0.0, cpu_s_per_s) * 1e6 / workers


def weights_table(results: list[dict[str, Any]]) -> str:
    """Where a version's bytes came from, with and without read replicas."""
    lines = [
        "\n| workers | read replicas | 1 MB version everywhere p50 / p99 / max | the primary sent to workers "
        "(/ N x size) | the primary sent to its replicas | the replicas sent to workers |",
        "| --- " * 6 + "|",
    ]
    for r in results:
        if (w := r.get("weights")) is None:
            continue
        lines.append(
            f"| {r['workers']:,} | {r['replicas']} | {w['p50']:.2f} / {w['p99']:.2f} / {w['max']:.2f} s | "
            f"{w['net_out'] / 2**20:,.1f} MiB ({w['net_out'] / w['bound']:.2f}) | {w['repl_out'] / 2**20:,.1f} MiB | "
            f"{w['replicas_net_out'] / 2**20:,.1f} MiB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000", help="fleet sizes, comma-separated (10: the baseline)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the measured phases")
    parser.add_argument(
        "--weights-up-to",
        type=int,
        default=1000,
        help="run the weights phase for fleets up to this size (this process downloads N x 1 MB)",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help=f"a {CLUSTER_MASTERS}-master Redis Cluster (no replicas) and the job's stream in {CLUSTER_MASTERS} shards "
        "instead of one redis-server",
    )
    parser.add_argument(
        "--replicas",
        default="0",
        help="read replicas serving the weights (spec.redis.readReplicas), comma-separated: each fleet size is run "
        "with each count (one redis-server only)",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    replica_counts = [int(r) for r in args.replicas.split(",")]
    if args.cluster and replica_counts != [0]:
        parser.error("--replicas: read replicas of one redis-server, not of a --cluster")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # redis-server and the fleet's processes inherit it
    runs, skipped = [], []
    for size in sizes:
        for count in replica_counts:
            # A worker's two connections are both on the primary, unless replicas take its subscription.
            on_primary = size * (1 if count else 2) + 2 * count + 16  # the learner's, the replicas', the bench's own
            if args.cluster or on_primary <= hard - FD_RESERVED:
                runs.append((size, count))
            else:
                why = (
                    f"{on_primary:,} connections on the primary redis-server, past the {hard - FD_RESERVED:,} its "
                    f"file-descriptor limit ({hard:,}, ulimit -Hn) allows: raise the limit, or add --replicas "
                    "(the weights' subscriptions go to them)"
                )
                skipped.append(f"{size:,} workers with {count} replicas: not run, {why}")
        if not any(run[0] == size for run in runs):
            parser.error(f"--sizes {size} with --replicas {args.replicas}: {why}")
    where = machine(fd_limit=hard)
    results = [
        run_size(n, args.seconds, weights=n <= args.weights_up_to, cluster=args.cluster, replicas=r) for n, r in runs
    ]
    on = f"a {CLUSTER_MASTERS}-master Redis Cluster, {CLUSTER_MASTERS} shards" if args.cluster else "one redis-server"
    print(f"# The data plane with hollow workers on {on} ({where['cores']} cores, {where['date']}; "
          f"{ROWS}-row fragments, {FRAGMENTS_PER_S:g}/s a worker up to {FLEET_FRAGMENTS_PER_S:,.0f}/s a fleet, "
          f"maxLen {MAX_LEN}, {args.seconds:g} s phases)\n")  # fmt: skip
    commands = Table("Redis commands a worker", "workers", ["waiting", "publishing"], unit="commands a second")
    cpu = Table("Redis CPU a worker", "workers", ["waiting", "publishing"], unit="us of Redis CPU a second")
    learner = Table(
        "The learner",
        "workers",
        ["rows/s, % of offered", "a batch from every worker, p99 s"],
        unit="% of what the fleet offers; seconds after a learner comes",
    )
    lines = [
        "| workers | waiting: commands/s | waiting: Redis CPU us/s | publishing: commands/s | publishing: "
        "Redis CPU us/s | connections | Redis memory | learner rows/s | a learner comes: "
        "all resumed p50 / p99 / max | 1 MB version everywhere p50 / p99 / max (bytes sent / N x size) | "
        "N x 1 MB by bare GETs (the ceiling) | heartbeat read (Redis's own time) |",
        "| --- " * 12 + "|",
    ]
    for r in results:
        n = r["workers"]
        wait_calls, wait_cpu = per_worker_s(r, "waiting")
        flow_calls, flow_cpu = per_worker_s(r, "flowing")
        rows = r["flowing"]["rows_per_s"]
        vs = f" ({rows / (n * ROWS * r['fragments_per_s']):.0%} of offered)"
        res, w = r["resume_s"], r.get("weights")
        us = r.get("heartbeat_redis_us")
        redis_us = "not read" if r["nodes"] > 1 else f"< {SLOWLOG_US} us" if us is None else f"{us / 1000:.1f} ms"
        notes = [f"{r['replicas']} replicas"] if r["replicas"] else []
        if r["fragments_per_s"] < FRAGMENTS_PER_S:
            notes.append(f"a fragment every {1 / r['fragments_per_s']:g} s")
        label = f" ({', '.join(notes)})" if notes else ""
        spread = "not run | not run" if w is None else (
            f"{w['p50']:.2f} / {w['p99']:.2f} / {w['max']:.2f} s ({w['net_out'] / w['bound']:.2f}) | {w['raw_s']:.2f} s"
        )  # fmt: skip
        lines.append(
            f"| {n:,}{label} | {wait_calls:.2f} | {wait_cpu:.0f} | {flow_calls:.1f} | {flow_cpu:.0f} | "
            f"{r['connections_per_worker']:.1f} | {r['memory_per_worker'] / 1024:.1f} KiB | {rows:,.0f}{vs} | "
            f"{res['p50']:.2f} / {res['p99']:.2f} / {res['max']:.2f} s | {spread} | "
            f"{r['heartbeat_read_s'] * 1000:.1f} ms ({redis_us}) |"
        )
        x = f"{n:,}{label}"
        commands.rows.append({"workers": x, "waiting": round(wait_calls, 2), "publishing": round(flow_calls, 2)})
        cpu.rows.append({"workers": x, "waiting": round(wait_cpu, 1), "publishing": round(flow_cpu, 1)})
        offered = 100 * rows / (n * ROWS * r["fragments_per_s"])
        learner.rows.append({"workers": x, "rows/s, % of offered": round(offered, 1),
                             "a batch from every worker, p99 s": round(res["p99"], 2)})  # fmt: skip
    print("\n".join(lines + [f"\n{line}" for line in skipped]))
    if replica_counts != [0]:
        print(weights_table(results))
    print("\nThe hollow fleet's own CPU (its processes: the workers' Python), us a worker-second: " + ", ".join(
        f"{r['workers']:,}{' (' + str(r['replicas']) + ' replicas)' if r['replicas'] else ''}: waiting "
        f"{r['waiting']['fleet_cpu_s'] / r['waiting']['seconds'] / r['workers'] * 1e6:.0f}, publishing "
        f"{r['flowing']['fleet_cpu_s'] / r['flowing']['seconds'] / r['workers'] * 1e6:.0f}"
        for r in results
    ))  # fmt: skip
    worst = max(results, key=lambda r: r["workers"])
    for phase in ("waiting", "flowing"):
        calls = sorted(worst[phase]["commands"].items(), key=lambda item: -item[1])
        per = ", ".join(f"{name} {count / worst['workers'] / worst[phase]['seconds']:.2f}" for name, count in calls)
        print(f"\nby command, {phase}, {worst['workers']:,} workers (a worker, a second): {per}")
        if args.cluster:
            shares = [cpu / worst[phase]["seconds"] * 1e6 / worst["workers"] for cpu in worst[phase]["cpu_s_by_node"]]
            print(f"Redis CPU by master, {phase} (us a worker-second, idle included): "
                  + ", ".join(f"{share:.0f}" for share in shares))  # fmt: skip
    name = "bench_dataplane_cluster" if args.cluster else "bench_dataplane"
    path = write(name, [commands, cpu, learner], where)
    path.with_name(f"{name}_phases.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""``make chaos``: a local fleet and a learner under a seeded random schedule of faults, then a
ledger of every batch (issue 13, item 4).

    python -m bench.chaos                    # 10 minutes; DURATION=120 SEED=7 to change

What runs: a ``redis-server`` with persistence on (AOF, fsync always) restarted on the same
port and directory, ``rolloutfleet run`` (the supervisor and its workers, ``block``
backpressure) and a learner process (this module, ``--learner``) reading as group
``learner``. Faults, one at a time, at random intervals: a worker SIGKILLed, Redis
restarted (SIGTERM, then started again on its data), Redis paused (SIGSTOP for 10 s), the
learner SIGKILLed between reading a batch and acknowledging it, the supervisor SIGTERMed
and started again, a poison entry written into the stream: every kind once per round,
in an order drawn from the seed, 8 to 16 s apart.

**The ledger.** Every batch carries an identity, its publisher's ``(producer, seq)``, with
``seq`` counting 0, 1, 2, ... per publisher. The learner acknowledges each batch and
records its identity in one Lua script (XACK, and HINCRBY only if the XACK acknowledged
it), so "acknowledged" and "recorded" cannot part, whatever is killed when. At the end
(faults stopped, the fleet stopped gracefully, the learner drained) every identity from
0 to the highest seq seen of each publisher must be acknowledged exactly once or be in a
drop counter (dead-lettered; trimmed and stale are 0 by construction here: ``block``,
no policy-lag bound). An identity acknowledged twice was delivered twice to training; one
missing is lost. A publisher's last batches are invisible to this check if every one of
them vanished (no later seq shows the gap): the stream's own length and pending count at
the end (both 0 once drained) cover what is still in Redis.

Ends with ``chaos: F faults, P published, A acked, D dropped (counted), L lost`` and exits
1 unless L and the duplicates are 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.transport.redis.keys import DEFAULT_GROUP, job_keys

JOB = "chaos"
KEYS = job_keys("default", JOB)
LEDGER = "chaos:acked"
PAUSE_S = 10.0
MANIFEST = {
    "apiVersion": "rolloutfleet.io/v1alpha1",
    "kind": "RolloutJob",
    "metadata": {"name": JOB},
    "spec": {
        "replicas": 2,
        "env": {"id": "CartPole-v1", "numEnvs": 2},
        "sampling": {"rolloutFragmentLength": 50},
        "redis": {"maxLen": 64, "backpressure": "block", "blockTimeoutSeconds": 60},
        "restartPolicy": {"maxRestarts": 100000, "backoffSeconds": 0.2, "backoffLimitSeconds": 2},
    },
}
# KEYS: stream, ledger; ARGV: group, entry id, identity. Acknowledged and recorded together.
ACK_AND_RECORD = """
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
end
return 1
"""


class PersistentRedis(EmbeddedRedis):
    """A redis-server whose data survives restarts (AOF, fsync always), same port and directory."""

    def __init__(self, directory: Path) -> None:
        super().__init__(port=free_port())
        self.data = directory

    def start(self, timeout: float = 30.0) -> PersistentRedis:
        binary = shutil.which(self.executable) or "redis-server"
        log = (self.data / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.ConnectionError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start: {(self.data / 'redis.log').read_text()[-500:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.send_signal(sig)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


@dataclass
class Fault:
    kind: str
    started: float
    ended: float = 0.0
    recovered: float | None = None  # when the learner acknowledged a new batch after it


@dataclass
class Drill:
    server: PersistentRedis
    manifest: Path
    log_dir: Path
    supervisor: subprocess.Popen[bytes] | None = None
    learner: subprocess.Popen[bytes] | None = None
    faults: list[Fault] = field(default_factory=list)
    acked_at_fault: int = 0

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.server.port, socket_timeout=5)

    def start_supervisor(self) -> None:
        out = (self.log_dir / "fleet.log").open("ab")
        self.supervisor = subprocess.Popen(
            [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(self.manifest), "--redis", self.server.url,
             "--no-status"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def start_learner(self) -> None:
        out = (self.log_dir / "learner.log").open("ab")
        self.learner = subprocess.Popen(
            [sys.executable, "-m", "bench.chaos", "--learner", self.server.url], stdout=out, stderr=subprocess.STDOUT
        )

    def acked(self) -> int | None:
        try:
            return int(self.client().hlen(LEDGER))
        except redis.RedisError:
            return None

    def workers(self) -> list[int]:
        if self.supervisor is None:
            return []
        path = Path(f"/proc/{self.supervisor.pid}/task/{self.supervisor.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except OSError:
            return []

    def inject(self, kind: str, rng: random.Random) -> None:
        fault = Fault(kind, time.monotonic())
        if kind == "worker SIGKILL":
            pids = self.workers()
            if pids:
                os.kill(rng.choice(pids), signal.SIGKILL)
        elif kind == "Redis restart":
            self.server.stop()
            self.server.start()
        elif kind == "Redis pause":
            assert self.server.process is not None
            self.server.process.send_signal(signal.SIGSTOP)
            time.sleep(PAUSE_S)
            self.server.process.send_signal(signal.SIGCONT)
        elif kind == "learner SIGKILL":
            assert self.learner is not None
            self.learner.kill()  # it spends most of its time between reading and acknowledging
            self.learner.wait()
            self.start_learner()
        elif kind == "supervisor SIGTERM":
            assert self.supervisor is not None
            self.supervisor.terminate()
            self.supervisor.wait(60)
            self.start_supervisor()
        elif kind == "poison entry":
            self.client().xadd(KEYS.batches, {"payload": os.urandom(256), "note": "chaos poison"})
        fault.ended = time.monotonic()
        self.faults.append(fault)


KINDS = ["worker SIGKILL", "Redis restart", "Redis pause", "learner SIGKILL", "supervisor SIGTERM", "poison entry"]


def run_drill(duration: float, seed: int, work: Path) -> int:
    rng = random.Random(seed)
    (work / "redis").mkdir(parents=True)
    manifest = work / "chaos.json"
    manifest.write_text(json.dumps(MANIFEST))
    drill = Drill(PersistentRedis(work / "redis").start(), manifest, work)
    drill.start_learner()
    drill.start_supervisor()
    print(f"chaos: seed {seed}, {duration:.0f} s, redis {drill.server.url}, logs in {work}", flush=True)
    try:
        deadline = time.monotonic() + duration
        next_fault = time.monotonic() + rng.uniform(8, 16)
        queue: list[str] = []
        while time.monotonic() < deadline:
            acked = drill.acked()
            last = drill.faults[-1] if drill.faults else None
            if last is not None and last.recovered is None and acked is not None and acked > drill.acked_at_fault:
                last.recovered = time.monotonic()
            if time.monotonic() >= next_fault:
                if not queue:  # every kind once per round, in a seeded order
                    queue = rng.sample(KINDS, len(KINDS))
                kind = queue.pop()
                print(f"chaos: {time.monotonic() - deadline + duration:6.1f} s  {kind}", flush=True)
                drill.inject(kind, rng)
                drill.acked_at_fault = drill.acked() or 0
                next_fault = time.monotonic() + rng.uniform(8, 16)
            time.sleep(0.2)
        return finish(drill)
    finally:
        for process in (drill.supervisor, drill.learner):
            if process is not None and process.poll() is None:
                process.kill()
        drill.server.stop()


def undelivered(client: Any) -> int:
    """Entries of the stream the learner group has not finished: pending, plus those after its
    last-delivered id, counted with XRANGE. Not XINFO's ``lag``: after Redis restarts its
    entries-read counter can stay behind though every entry was delivered (seen: lag 1342 with
    last-delivered-id equal to the last entry and nothing pending)."""
    groups = {g["name"].decode(): g for g in client.xinfo_groups(KEYS.batches)}
    group = groups.get(DEFAULT_GROUP)
    if group is None:
        return int(client.xlen(KEYS.batches))
    last = group["last-delivered-id"].decode()
    after = client.xrange(KEYS.batches, min=f"({last}", max="+")
    return int(group["pending"]) + len(after)


def finish(drill: Drill) -> int:
    """Stop the faults and the fleet, let the learner drain, then check the ledger."""
    assert drill.supervisor is not None
    drill.supervisor.terminate()
    drill.supervisor.wait(120)
    client: Any = drill.client()  # replies as bytes
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if undelivered(client) == 0:
            break
        time.sleep(0.5)
    assert drill.learner is not None
    drill.learner.terminate()
    drill.learner.wait(30)
    acked = {key.decode(): int(count) for key, count in client.hgetall(LEDGER).items()}
    dead: set[str] = set()
    poison = 0
    for _, fields in client.xrange(KEYS.dead_letters):
        if b"producer" in fields and b"seq" in fields:
            dead.add(f"{fields[b'producer'].decode()}:{int(fields[b'seq'])}")
        else:
            poison += 1
    highest: dict[str, int] = defaultdict(lambda: -1)
    for identity in [*acked, *dead]:
        producer, seq = identity.rsplit(":", 1)
        highest[producer] = max(highest[producer], int(seq))
    published = sum(top + 1 for top in highest.values())
    everything = (f"{producer}:{seq}" for producer, top in highest.items() for seq in range(top + 1))
    lost = [identity for identity in everything if identity not in acked and identity not in dead]
    twice = sorted(identity for identity, count in acked.items() if count > 1)
    left = undelivered(client)
    report(drill.faults, published, len(acked), len(dead), poison, twice, lost, left)
    return 0 if not lost and not twice and not left else 1


def report(
    faults: list[Fault],
    published: int,
    acked: int,
    dead: int,
    poison: int,
    twice: list[str],
    lost: list[str],
    left: int,
) -> None:
    by_kind: dict[str, list[Fault]] = defaultdict(list)
    for fault in faults:
        by_kind[fault.kind].append(fault)
    print(f"\n{'fault':<20} {'count':>5} {'recovery (median s)':>20}")
    for kind in KINDS:
        times = sorted(f.recovered - f.ended for f in by_kind[kind] if f.recovered is not None)
        median = f"{times[len(times) // 2]:.1f}" if times else "-"
        print(f"{kind:<20} {len(by_kind[kind]):>5} {median:>20}")
    print(f"\npublished {published}, acked {acked}, dead-lettered {dead} (+{poison} poison entries), trimmed 0, "
          f"stale 0, acked twice {len(twice)}, left in Redis {left}")  # fmt: skip
    if twice:
        print(f"acked twice: {', '.join(twice[:10])}")
    if lost:
        print(f"lost: {', '.join(lost[:10])}")
    print(f"chaos: {len(faults)} faults, {published} published, {acked} acked, {dead} dropped (counted), "
          f"{len(lost) + left} lost")  # fmt: skip


def learner(url: str) -> int:
    """The drill's learner: read, 'train' a little, acknowledge and record in one script."""
    from rolloutfleet.transport.consumer import BatchConsumer
    from rolloutfleet.transport.redis.connection import RetryLoop

    consumer = BatchConsumer(url, JOB, consumer=f"learner-{os.getpid()}", block_s=0.2, reclaim_idle_s=5.0)
    client = redis.Redis.from_url(url, socket_timeout=15)
    record = client.register_script(ACK_AND_RECORD)
    retry = RetryLoop(300.0)
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    while not stop:
        messages = consumer.read(count=4, timeout=1.0)
        if not messages:
            continue
        time.sleep(0.05)  # training: a SIGKILL most likely lands here, batches read and not acknowledged
        for message in messages:
            identity = f"{message.metadata.producer}:{message.metadata.seq}"

            def ack(entry_id: str = message.id, identity: str = identity) -> Any:
                return record(keys=[KEYS.batches, LEDGER], args=[DEFAULT_GROUP, entry_id, identity])

            retry.call(ack)
        consumer.ack(messages)  # the consumer's own bookkeeping (already acknowledged: a no-op in Redis)
    print(f"learner: {consumer.stats}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=float(os.environ.get("DURATION", 600)))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SEED", 0)))
    parser.add_argument("--learner", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.learner:
        return learner(args.learner)
    work = Path(tempfile.mkdtemp(prefix="rolloutfleet-chaos-"))
    return run_drill(args.duration, args.seed, work)


if __name__ == "__main__":
    sys.exit(main())

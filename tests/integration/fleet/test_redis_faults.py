"""Real worker processes against a Redis that pauses, fills up or forgets (issue 13, item 2):
nothing delivered twice, no crash loop, no stale weights. The transport-level tests of the
same defects are in ``tests/integration/transport/test_redis_faults.py``."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message
from rolloutfleet.transport.heartbeat import parse_heartbeats
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import small_job, wait_until
from tests.integration.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "w")


def blocking_spec(max_len: int) -> str:
    spec = small_job("w", replicas=1).to_dict()["spec"]
    spec["redis"] = {"maxLen": max_len, "backpressure": "block", "blockTimeoutSeconds": 5}
    return json.dumps(spec)


def metric(port: int, name: str) -> float:
    """A worker's metric; 0 while its /metrics does not answer yet."""
    try:
        return _metric(port, name)
    except OSError:
        return 0.0


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no metric {name}")


class Learner:
    """Reads and acks in a thread; ``pause_s`` between reads makes it slower than the worker."""

    def __init__(self, url: str, pause_s: float = 0.0) -> None:
        self.consumer = BatchConsumer(url, "w", block_s=0.2)
        self.received: list[Message] = []
        self.pause_s = pause_s
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                messages = self.consumer.read(count=4, timeout=0.5)
                self.consumer.ack(messages)
                self.received.extend(messages)
                self._stop.wait(self.pause_s)
        except Exception as exc:  # noqa: BLE001 (the test says what killed the learner)
            self.error = exc

    def __enter__(self) -> Learner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    server = RedisServer(executable=redis_server_binary(), maxmemory="4mb")
    server.start()
    yield server
    server.close()


def test_a_full_redis_holds_the_worker_back_instead_of_crash_looping(full_redis: RedisServer, tmp_path: Path) -> None:
    """Defect 8: with maxmemory reached (noeviction) workers exited on OutOfMemoryError and
    restarted in a loop, and the stream never shrank though the learner drained it."""
    port = free_port()
    log = tmp_path / "worker.stderr"
    learner = Learner(full_redis.url)  # its group exists; it reads once Redis is full
    with log.open("w") as stderr:
        # maxLen far above what fits in 4 MB (~10 KB a batch): only memory limits the stream.
        worker = start_worker(full_redis.url, port, tmp_path, stderr=stderr, ROLLOUTFLEET_SPEC=blocking_spec(100_000))
    try:
        wait_until(
            lambda: worker.poll() is not None or metric(port, "rolloutfleet_redis_full_wait_seconds_total") > 0,
            240,
            "Redis filling up",
        )
        assert worker.poll() is None, log.read_text()[-2000:]
        with learner:
            wait_until(lambda: len(learner.received) >= 800 or worker.poll() is not None, 240, "800 batches")
            assert worker.poll() is None, log.read_text()[-2000:]
            assert learner.error is None, learner.error
        seqs = [m.metadata.seq for m in learner.received]
        assert seqs == list(range(len(seqs))), "a batch lost or delivered twice"
        assert full_redis.client().xlen(KEYS.batches) < len(seqs)  # consumed entries were trimmed
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()[-2000:]
    finally:
        worker.kill()


def test_workers_load_the_learners_weights_after_redis_lost_its_state(own_redis: RedisServer, tmp_path: Path) -> None:
    """Defect 9: after a restart without persistence the learner's versions 1, 2, 3 were
    ignored by workers holding version 5, which kept sampling with old weights, silently."""
    model = build_model(small_job("w", replicas=1))
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    port = free_port()
    log = tmp_path / "worker.stderr"
    client = own_redis.client()

    def held_version() -> float:
        return parse_heartbeats(client.hgetall(KEYS.heartbeats)).get(0, {}).get("weights_seq_no", -1)

    with log.open("w") as stderr:
        worker = start_worker(own_redis.url, port, tmp_path, stderr=stderr)
    try:
        learner = WeightPublisher(own_redis.url, "w")
        for _ in range(3):
            learner.publish(state)
        wait_until(lambda: held_version() == 3, 120, "the worker sampling with version 3")
        own_redis.restart(down_s=0.2)  # a crash: counter, versions, heartbeats are gone
        wait_until(lambda: client.get(KEYS.weights_held) == b"3", 60, "the worker reporting the version it holds")
        fresh = WeightPublisher(own_redis.url, "w")  # the learner restarted too: it remembers nothing
        zeros = {k: np.zeros_like(v) for k, v in state.items()}
        assert fresh.publish(zeros) == 4
        wait_until(lambda: held_version() == 4, 60, "the worker sampling with the learner's new version")
        assert metric(port, "rolloutfleet_weights_resets_total") == 1
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        assert "is gone while this worker holds version 3" in log.read_text()
    finally:
        worker.kill()


@pytest.mark.slow
def test_a_worker_paused_past_its_socket_timeout_delivers_each_fragment_once(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    """Defect 5, as it was seen: Redis paused longer than the socket timeout; the worker
    re-sent its fragment as a new publish and the learner got it twice (same observations,
    seq 113 and 114)."""
    port = free_port()
    log = tmp_path / "worker.stderr"
    with log.open("w") as stderr:
        worker = start_worker(own_redis.url, port, tmp_path, stderr=stderr, ROLLOUTFLEET_SPEC=blocking_spec(8))
    try:
        with Learner(own_redis.url) as learner:
            wait_until(lambda: len(learner.received) >= 20, 120, "the first batches")
            with own_redis.pause() as pause:
                pause.resume_after(35.0)
                time.sleep(36.0)
            wait_until(lambda: metric(port, "rolloutfleet_batches_published_total") >= 40, 120, "more batches")
            time.sleep(1.0)
        assert learner.error is None, learner.error
        seqs = [m.metadata.seq for m in learner.received]
        assert len(seqs) == len(set(seqs)), "a fragment delivered twice"
        fragments = [m.batch["obs"].tobytes() for m in learner.received]
        assert len(fragments) == len(set(fragments)), "the same observations delivered twice"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def test_a_worker_refused_by_maxclients_waits_says_why_and_publishes_once_a_connection_is_free(
    tmp_path: Path,
) -> None:
    """Redis at ``maxclients`` answers a new connection with an error: the worker says so in
    one line naming the setting, stays up (not ready), backs off, and publishes once
    connections are free again; no crash, no restart."""
    import redis

    server = RedisServer(executable=redis_server_binary(), extra_args=("--maxclients", "4"))
    server.start()
    hogs: list[redis.Redis] = []
    try:
        admin = server.client()
        admin.ping()
        hogs = [server.client() for _ in range(3)]
        for hog in hogs:
            hog.ping()  # 4 of 4: the worker's first connection is refused
        port, log = free_port(), tmp_path / "worker.log"
        with log.open("w") as stderr:
            worker = start_worker(server.url, port, tmp_path, stderr=stderr, log_level="INFO")
        try:
            wait_until(lambda: "max number of clients reached" in log.read_text() or worker.poll() is not None, 60,
                       "the worker's line about maxclients")  # fmt: skip
            assert worker.poll() is None, log.read_text()[-2000:]
            line = next(x for x in log.read_text().splitlines() if "max number of clients reached" in x)
            assert "maxclients" in line and "redis.maxClients" in line, line
            for hog in hogs:
                hog.close()
            wait_until(lambda: admin.xlen(KEYS.batches) > 0 or worker.poll() is not None, 60, "a batch published")
            assert worker.poll() is None and admin.xlen(KEYS.batches) > 0, log.read_text()[-2000:]
            assert metric(port, "rolloutfleet_redis_errors_total") >= 1
            assert "Traceback" not in log.read_text()
        finally:
            worker.terminate()
            assert worker.wait(30) == 0
    finally:
        for hog in hogs:
            hog.close()
        server.close()

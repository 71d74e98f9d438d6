"""Real worker processes with no learner (issue 25, item 1): a full ``block`` stream is
"waiting for a learner", a healthy state. The worker stays ready, keeps its fragment, says
so once at the start and once at the end, and its heartbeat and metrics carry it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.transport.entries import decode_entry
from rolloutfleet.transport.heartbeat import parse_heartbeats
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_redis_faults import Learner, metric
from tests.integration.fleet.test_worker import probe, start_worker, wait_probe
from tests.integration.fleet_helpers import small_job, wait_until
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "w")
START = "waiting for a learner to read rolloutfleet:{default/w}:batches"
END = "stopped waiting for a learner after"


def blocking_spec(max_len: int, block_timeout_s: float) -> str:
    spec = small_job("w", replicas=1).to_dict()["spec"]
    spec["redis"] = {"maxLen": max_len, "backpressure": "block", "blockTimeoutSeconds": block_timeout_s}
    return json.dumps(spec)


def heartbeat(server: RedisServer) -> dict[str, float]:
    return dict(parse_heartbeats(server.client().hgetall(KEYS.heartbeats)).get(0, {}))


def start(server: RedisServer, tmp_path: Path, log: Path, spec: str) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    with log.open("w") as stderr:
        worker = start_worker(server.url, port, tmp_path, stderr=stderr, log_level="INFO", ROLLOUTFLEET_SPEC=spec)
    return worker, port


def test_no_learner_is_ready_and_said_once_until_a_learner_reads(own_redis: RedisServer, tmp_path: Path) -> None:
    # A blockTimeoutSeconds far below the publisher's one-second report: the waits end in
    # BackpressureTimeout, again and again, which used to read as a Redis outage.
    log = tmp_path / "worker.stderr"
    worker, port = start(own_redis, tmp_path, log, blocking_spec(max_len=2, block_timeout_s=0.3))
    try:
        wait_until(lambda: START in log.read_text() or worker.poll() is not None, 120, "the start-waiting line")
        assert worker.poll() is None, log.read_text()[-2000:]
        # Several timeouts later (backpressure seconds keep counting): ready all along, one
        # line, no Redis error, and the heartbeat says since when (sampling nothing).
        for timeouts in range(1, 5):

            def counted(seconds: float = 0.3 * timeouts) -> bool:
                return metric(port, "rolloutfleet_backpressure_wait_seconds_total") >= seconds

            wait_until(counted, 60, f"{timeouts} timeouts counted")
            assert probe(port, "/readyz") == 200
        assert metric(port, "rolloutfleet_waiting_for_learner") == 1
        assert metric(port, "rolloutfleet_redis_errors_total") == 0
        text = log.read_text()
        assert text.count(START) == 1 and END not in text, text[-2000:]
        assert "redis unavailable" not in text and "WARNING" not in text, text[-2000:]
        beat = heartbeat(own_redis)
        assert beat["waiting_for_learner_since"] > 0 and beat["steps_per_s"] == 0
        assert own_redis.client().xlen(KEYS.batches) == 2  # waiting, not dropping

        with Learner(own_redis.url) as learner:
            wait_until(lambda: END in log.read_text() and len(learner.received) >= 6, 120, "the end line")
            wait_until(lambda: "waiting_for_learner_since" not in heartbeat(own_redis), 60, "a heartbeat not waiting")
            assert metric(port, "rolloutfleet_waiting_for_learner") == 0
            assert learner.error is None, learner.error
        seqs = [m.metadata.seq for m in learner.received]
        assert seqs == list(range(len(seqs))), "a batch lost or delivered twice"  # the kept fragment included
        text = log.read_text()
        assert text.count(START) == 1 and text.count(END) == 1, text[-2000:]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, log.read_text()[-2000:]
    finally:
        worker.kill()


def test_a_worker_restarted_against_a_full_stream_is_ready_and_stops_promptly(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    # blockTimeoutSeconds far above every wait here: the publisher's once-a-second report is
    # what says the worker waits, and only a stop ends the wait.
    spec = blocking_spec(max_len=2, block_timeout_s=600)
    first_log = tmp_path / "first.stderr"
    first, _ = start(own_redis, tmp_path, first_log, spec)
    try:
        wait_until(lambda: START in first_log.read_text() or first.poll() is not None, 120, "the first one waiting")
    finally:
        first.kill()  # SIGKILL, as a node or the OOM killer would
        first.wait(30)
    assert own_redis.client().xlen(KEYS.batches) == 2

    log = tmp_path / "second.stderr"
    worker, port = start(own_redis, tmp_path, log, spec)
    try:
        wait_probe(port, "/readyz", 200, 120)
        wait_until(lambda: START in log.read_text() or worker.poll() is not None, 120, "the replacement waiting")
        wait_until(lambda: heartbeat(own_redis).get("waiting_for_learner_since", 0) > 0, 60, "a waiting heartbeat")
        assert probe(port, "/readyz") == 200 and probe(port, "/healthz") == 200
        assert metric(port, "rolloutfleet_waiting_for_learner") == 1
        assert own_redis.client().xlen(KEYS.batches) == 2
        # SIGTERM while waiting: the wait ends (the existing interrupt), exit 0, well
        # before blockTimeoutSeconds.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(120) == 0, log.read_text()[-2000:]
        text = log.read_text()
        assert text.count(START) == 1 and f"{END}" in text and "stopping" in text, text[-2000:]
        assert "stopped cleanly" in text
    finally:
        worker.kill()


def test_rolloutfleet_run_shows_the_fleet_waiting_for_a_learner(tmp_path: Path) -> None:
    """The real command with its embedded Redis and no learner: the table it leaves says so."""
    manifest = tmp_path / "w.yaml"
    spec = json.loads(blocking_spec(max_len=2, block_timeout_s=600))
    manifest.write_text(json.dumps({"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob",
                                    "metadata": {"name": "w"}, "spec": {**spec, "replicas": 2}}))  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--duration", "30"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "250"},
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    title = next(line for line in run.stderr.splitlines() if line.startswith("default/w: "))
    assert "2/2 workers up, 0 restarts, 2 waiting for a learner" in title, run.stderr[-3000:]
    rows = [line for line in run.stderr.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and all("waiting for learner" in row for row in rows), run.stderr[-3000:]


def test_a_worker_stopped_on_a_full_stream_counts_the_fragment_it_drops(own_redis: RedisServer, tmp_path: Path) -> None:
    """A preemption or a drain while no learner reads: the fragment in hand cannot be
    published, so it is dropped and counted. The last heartbeat (it outlives the pod, in
    Redis) says where every row went; the stream's own rows check it."""
    log = tmp_path / "worker.stderr"
    worker, _ = start(own_redis, tmp_path, log, blocking_spec(max_len=2, block_timeout_s=600))
    try:
        wait_until(lambda: START in log.read_text() or worker.poll() is not None, 120, "the worker waiting")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(120) == 0, log.read_text()[-2000:]
    finally:
        worker.kill()
    beat = heartbeat(own_redis)
    entries = own_redis.client().xrange(KEYS.batches)
    stream_rows = sum(len(decode_entry(fields)[0]) for _, fields in entries)
    assert len(entries) == 2 and beat["rows_published"] == stream_rows, (beat, stream_rows)
    assert beat["rows_dropped"] == stream_rows / 2  # one whole fragment, as each published one
    assert beat["rows_sampled"] == beat["rows_published"] + beat["rows_dropped"], beat
    text = log.read_text()
    assert f"dropped one fragment ({int(beat['rows_dropped'])} rows)" in text, text[-2000:]
    assert f"{int(beat['rows_sampled'])} rows sampled: {int(beat['rows_published'])} published" in text

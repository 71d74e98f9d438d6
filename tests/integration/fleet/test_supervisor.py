"""The local fleet with real worker processes and a real redis-server."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.fleet_helpers import read_until, small_job
from tests.integration.redis_server import RedisServer


def wait_for(condition, timeout: float, fleet: LocalFleet) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fleet.poll()
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"condition not met in {timeout} s; workers: {fleet.workers}")


def test_fleet_publishes_and_replaces_a_killed_worker(redis_url: str) -> None:
    job = small_job()
    consumer = BatchConsumer(redis_url, job.name, group="test")
    with LocalFleet(job, redis_url=redis_url) as fleet:
        first = read_until(consumer, lambda ms: {m.metadata.worker_index for m in ms} == {0, 1}, timeout=90)
        producers_before = {m.metadata.producer for m in first if m.metadata.worker_index == 0}
        old_pid = fleet.workers[0].process.pid  # type: ignore[union-attr]
        fleet.kill(0, signal.SIGKILL)
        wait_for(lambda: fleet.restarts == 1 and fleet.workers[0].state == "running", 30, fleet)
        assert fleet.workers[0].process.pid != old_pid  # type: ignore[union-attr]
        assert fleet.workers[0].exit_code == -signal.SIGKILL
        # The replacement (a new producer) publishes again.
        read_until(
            consumer,
            lambda ms: any(m.metadata.worker_index == 0 and m.metadata.producer not in producers_before for m in ms),
            timeout=90,
        )
        assert fleet.workers[1].state == "running" and fleet.tracker.workers[1].restarts == 0
    # SIGTERM drained both workers: exit code 0, nothing left running.
    assert all(w.process is not None and w.process.returncode == 0 for w in fleet.workers.values())
    # A worker failed during the run: its temporary log folder is kept, with the logs.
    assert fleet.kept_logs == fleet.log_dir and (fleet.log_dir / "worker-0.log").exists()


def test_a_clean_run_leaves_no_temporary_folder(redis_url: str) -> None:
    job = small_job("tidy", replicas=1)
    consumer = BatchConsumer(redis_url, job.name, group="test")
    with LocalFleet(job, redis_url=redis_url) as fleet:
        read_until(consumer, lambda ms: len(ms) >= 1, timeout=90)
        assert (fleet.log_dir / "worker-0.log").exists()
    assert fleet.kept_logs is None and not fleet.log_dir.exists()


def test_restart_budget_is_spent_and_reported(redis_url: str, caplog) -> None:  # type: ignore[no-untyped-def]
    job = small_job("budget", replicas=1, maxRestarts=1)
    with LocalFleet(job, redis_url=redis_url) as fleet:
        wait_for(lambda: fleet.workers[0].process is not None, 5, fleet)
        fleet.kill(0)
        wait_for(lambda: fleet.restarts == 1 and fleet.workers[0].state == "running", 30, fleet)
        fleet.kill(0)
        wait_for(lambda: fleet.workers[0].state == "failed", 30, fleet)
        time.sleep(1.5)  # longer than any backoff: still no restart
        fleet.poll()
        assert fleet.workers[0].state == "failed" and fleet.restarts == 1
    assert "restart budget spent (1 restarts, maxRestarts=1)" in caplog.text


def test_fleet_rides_out_a_redis_restart_without_restarting_workers(own_redis: RedisServer) -> None:
    job = small_job("ride", replicas=1)
    with LocalFleet(job, redis_url=own_redis.url) as fleet:
        consumer = BatchConsumer(own_redis.url, job.name, group="test")
        read_until(consumer, lambda ms: len(ms) >= 2, timeout=90)
        own_redis.restart(down_s=1.0)  # a crash: the stream and the group are gone
        consumer = BatchConsumer(own_redis.url, job.name, group="test")
        read_until(consumer, lambda ms: len(ms) >= 2, timeout=60)
        fleet.poll()
        assert fleet.restarts == 0 and fleet.workers[0].state == "running"


def test_run_fails_fast_on_a_bad_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: RolloutJob\nmetadata: {name: x}\nspec: {env: {id: CartPole-v1, numEnvs: 0}}\n")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "spec.env.numEnvs" in result.stderr
    assert time.monotonic() - started < 30  # no workers were started


def test_a_worker_whose_python_lacks_a_module_stops_once_without_a_restart(redis_url: str, caplog) -> None:  # type: ignore[no-untyped-def]
    """As the operator does with a pod: the same Python would fail the same way, so no backoff loop."""
    job = small_job("lacks", replicas=1)
    job = job.from_dict(
        {**job.to_dict(), "spec": {**job.to_dict()["spec"], "env": {"entryPoint": "no_such_module_anywhere:make"}}}
    )
    with LocalFleet(job, redis_url=redis_url) as fleet:
        wait_for(lambda: fleet.workers[0].state != "running", 90, fleet)
        time.sleep(1.5)  # past the 0.2-1 s backoff: a restart would have happened
        fleet.poll()
        worker = fleet.workers[0]
        assert worker.state == "failed" and worker.exit_code == 3 and fleet.restarts == 0
        assert worker.last_error.startswith("missing Python module 'no_such_module_anywhere': "), worker.last_error
        assert "install it" in worker.last_error and sys.executable in worker.last_error
        log_text = (fleet.log_dir / "worker-0.log").read_text()
    assert log_text.count("rolloutfleet worker: missing Python module") == 1, log_text  # started once
    said = [r.getMessage() for r in caplog.records if "stays down" in r.getMessage()]
    assert len(said) == 1 and "no_such_module_anywhere" in said[0], said

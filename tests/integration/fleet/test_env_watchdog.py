"""A real worker process whose env hangs (a Python env that sleeps, or spins, for ever in its
constructor, ``reset`` or ``step``): exit 3 with one line naming the sub-env and the call, the
termination message and the last heartbeat saying so, no env process left behind; and a stop
signal during the hang ends the worker within the grace period.

Defect reproduced first: the worker said nothing, kept its heartbeat silent and ignored
SIGTERM for as long as the env hung (until the kubelet's SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.heartbeat import read_heartbeats
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import wait_until

pytestmark = pytest.mark.integration

HANGING_ENV = "tests.unit.sampling.poison_envs:make_hanging_env"
GRACE_S = 30  # the operator's default terminationGracePeriodSeconds


def spec(vectorization: str, timeout_s: float, **config: Any) -> dict[str, Any]:
    return {
        "env": {"entryPoint": HANGING_ENV, "numEnvs": 2, "vectorization": vectorization,
                "callTimeoutSeconds": timeout_s, "config": {"hang_env": 1, "after": 3, **config}},
        "sampling": {"rolloutFragmentLength": 10},
        "redis": {"maxLen": 100, "backpressure": "dropOldest"},
    }  # fmt: skip


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" in status.read_text()  # a zombie not reaped yet has ended


@pytest.mark.parametrize(
    ("vectorization", "hang", "spin"),
    [("sync", "step", False), ("sync", "constructor", False), ("sync", "reset", True), ("async", "step", False)],
)
def test_a_hung_env_call_ends_the_worker_with_exit_3_and_one_line(
    redis_url: str, tmp_path: Path, vectorization: str, hang: str, spin: bool
) -> None:
    mark = tmp_path / "hanging"
    job_spec = spec(vectorization, 1, hang=hang, spin=spin, mark=str(mark))
    worker = start_worker(redis_url, 0, tmp_path, log_level="INFO", ROLLOUTFLEET_SPEC=json.dumps(job_spec))
    _, stderr = worker.communicate(timeout=120)
    assert worker.returncode == 3, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    expected = f"spec.env.entryPoint '{HANGING_ENV}': sub-env 1 {hang} has not returned after "
    assert len(lines) == 1 and expected in lines[0] and "(spec.env.callTimeoutSeconds is 1)" in lines[0], stderr
    assert "Traceback" not in stderr
    assert stderr.count("has not returned") == 2  # the log line (once) and the one line
    line = lines[0].removeprefix("rolloutfleet worker: ")
    assert (tmp_path / "termination").read_text().strip() == line
    hung_pid = int(mark.read_text())
    wait_until(lambda: gone(hung_pid), 30, "the hung env's process (async) or the worker ended")
    if hang == "step":  # Redis was reached before the first fragment: the last heartbeat says why
        job = RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": job_spec})
        assert read_heartbeats(redis_url, job)[0]["env_call_stuck"] == line


@pytest.mark.parametrize(("vectorization", "spin"), [("sync", False), ("sync", True), ("async", False)])
def test_sigterm_during_a_hang_ends_the_worker_within_the_grace_period(
    redis_url: str, tmp_path: Path, vectorization: str, spin: bool
) -> None:
    mark = tmp_path / "hanging"
    job_spec = spec(vectorization, 3600, spin=spin, mark=str(mark))  # the watchdog's timeout never comes
    worker = start_worker(redis_url, 0, tmp_path, log_level="INFO", ROLLOUTFLEET_SPEC=json.dumps(job_spec))
    try:
        wait_until(lambda: (mark.exists() and mark.read_text() != "") or worker.poll() is not None, 120, "the hang")
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=GRACE_S)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, stderr
    assert "sub-env 1 step still running" in stderr and "after the stop signal" in stderr, stderr
    assert "Traceback" not in stderr and "rolloutfleet worker:" not in stderr
    hung_pid = int(mark.read_text())
    wait_until(lambda: gone(hung_pid), 30, "the hung env's process")


def test_slow_calls_each_within_the_timeout_are_left_alone(redis_url: str, tmp_path: Path) -> None:
    """Each step takes 0.6 s, a vector step of 2 sub-envs 1.2 s: over the 1 s timeout only if
    the watchdog timed vector steps instead of calls."""
    from rolloutfleet.transport.consumer import BatchConsumer
    from tests.integration.fleet_helpers import read_until

    job_spec = spec("sync", 1, hang_env=9, slow=0.6)  # no sub-env 9: nothing hangs
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(job_spec))
    try:
        read_until(BatchConsumer(redis_url, "w", group="t"), lambda ms: len(ms) >= 2, timeout=120)
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=GRACE_S)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0 and "has not returned" not in stderr, stderr

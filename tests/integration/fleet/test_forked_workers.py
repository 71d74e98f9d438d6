"""Workers forked from the warm server (autoscaled jobs of ``rolloutfleet run``), with a real
redis-server: they publish, a killed one is restarted, SIGTERM drains them, and they end
when the supervisor is SIGKILLed. Facts about processes are read from /proc."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from rolloutfleet.fleet import local_forkserver
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_boundaries import alive
from tests.integration.fleet_helpers import read_until, small_job, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not local_forkserver.available() and os.environ.get("CI") != "true",  # CI runs 3.11: there it must run
        reason="no fork server on this platform",
    ),
]


def stat(pid: int) -> tuple[str, int]:
    """The process's name (comm) and its parent's pid, from /proc."""
    text = Path(f"/proc/{pid}/stat").read_text()
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, int(text.rsplit(")", 1)[1].split()[1])


def name_of(pid: int) -> str:
    try:
        return stat(pid)[0]
    except OSError:
        return ""  # gone


def descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = stat(int(entry.name))[1]
            except (OSError, ValueError):
                continue
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        kids = [child for child, parent in parents.items() if parent == pid]
        found |= set(kids)
        todo += kids
    return found


def test_a_forked_worker_publishes_is_restarted_after_sigkill_and_drains_on_sigterm(redis_url: str) -> None:
    job = small_job("forked", replicas=1)
    consumer = BatchConsumer(redis_url, job.name, group="test")
    with LocalFleet(job, redis_url=redis_url, start="fork") as fleet:
        first = {m.metadata.producer for m in read_until(consumer, lambda ms: len(ms) >= 1, timeout=90)}
        worker = fleet.workers[0].process
        assert worker is not None
        name, parent = stat(worker.pid)
        assert name == "rf-worker-0" and parent != os.getpid()  # forked by the server, not by us
        maps = Path(f"/proc/{worker.pid}/maps").read_text()
        assert "numpy" in maps and "torch" not in maps  # the library came with the fork; no torch
        fleet.kill(0, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (fleet.restarts == 1 and fleet.workers[0].state == "running") and time.monotonic() < deadline:
            fleet.poll()
            time.sleep(0.1)
        assert fleet.workers[0].exit_code == -signal.SIGKILL and fleet.restarts == 1
        replacement = fleet.workers[0].process
        assert replacement is not None and replacement.pid != worker.pid
        read_until(consumer, lambda ms: any(m.metadata.producer not in first for m in ms), timeout=90)
    # SIGTERM: the fragment in hand published, exit 0, as for a worker started as a command.
    assert replacement.returncode == 0 and not alive(replacement.pid)
    assert "stopped cleanly" in (fleet.log_dir / "worker-0.log").read_text()


def text(path: Path) -> str:
    return path.read_text(errors="replace")


def autoscaled_manifest(tmp_path: Path) -> Path:
    job = small_job("forked-run", replicas=2).to_dict()["spec"]
    job["autoscaling"] = {"minReplicas": 2, "maxReplicas": 3, "idleSeconds": 600}
    job["redis"] = {"maxLen": 200, "backpressure": "block"}
    manifest = tmp_path / "job.yaml"
    manifest.write_text(json.dumps({"metadata": {"name": "forked-run"}, "spec": job}))
    RolloutJob.from_file(manifest)  # valid
    return manifest


def test_forked_workers_end_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    """Held by a worker, the server's pipe would keep the server, and its workers, alive."""
    stderr_path = tmp_path / "run.stderr"
    stderr = stderr_path.open("wb")
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(autoscaled_manifest(tmp_path)), "--no-status"],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    started: set[int] = set()
    try:

        def two_workers() -> bool:
            started.update(descendants(supervisor.pid))
            return sum(1 for pid in started if alive(pid) and name_of(pid).startswith("rf-worker")) == 2

        wait_until(two_workers, 120, "two forked workers")
        # Both have published: their signal handlers and parent watch are in place.
        wait_until(lambda: re.search(r"redis (redis://\S+),", text(stderr_path)) is not None, 60, "the URL")
        url = re.search(r"redis (redis://\S+),", text(stderr_path))
        assert url is not None
        client = redis.Redis.from_url(url.group(1))
        stream = job_keys("default", "forked-run").batches
        wait_until(
            lambda: {int(f[b"worker_index"]) for _, f in client.xrange(stream)} == {0, 1}, 120, "batches of both"
        )
        client.close()
        everything = descendants(supervisor.pid)
        supervisor.kill()
        supervisor.wait(30)
        deadline = time.monotonic() + 30  # a few seconds expected; generous on a loaded machine
        while time.monotonic() < deadline and any(alive(pid) for pid in everything):
            time.sleep(0.2)
        left = {pid: name_of(pid) for pid in everything if alive(pid)}
        assert left == {}, f"orphans 30 s after the SIGKILL: {left}"
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

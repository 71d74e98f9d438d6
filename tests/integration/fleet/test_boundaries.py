"""``rolloutfleet run`` as a process: however it is stopped, nothing it started outlives it.

Facts are read from /proc (who is whose child, who is still alive), never from the
fleet's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet_helpers import small_job, wait_until


def alive(pid: int) -> bool:
    """Running (a zombie, waiting for a parent that will never reap it, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def children(pid: int) -> dict[int, str]:
    """Live child processes of ``pid``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state not in ("Z", "X"):
            found[int(entry.name)] = cmdline
    return found


class Supervisor:
    """A ``rolloutfleet run`` process of a two-worker job, with its embedded Redis."""

    def __init__(self, tmp_path: Path, command: tuple[str, ...] = ()) -> None:
        self.job = small_job("boundaries", replicas=2)
        manifest = tmp_path / "job.yaml"
        manifest.write_text(json.dumps({"metadata": {"name": self.job.name}, "spec": self.job.to_dict()["spec"]}))
        self.stderr_path = tmp_path / "run.stderr"
        self.started: set[int] = set()
        with self.stderr_path.open("wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--no-status", *command],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def running(self) -> dict[str, list[int]]:
        """Its children by kind, once the embedded Redis and both workers are up and both
        workers have published (their signal handlers are in place)."""
        wait_until(lambda: re.search(r"redis (redis://\S+),", self.stderr) is not None, 60, "the fleet's Redis URL")
        match = re.search(r"redis (redis://\S+),", self.stderr)
        assert match is not None
        url = match.group(1)
        client = redis.Redis.from_url(url)
        stream = job_keys(self.job.namespace, self.job.name).batches

        def published_by_both() -> bool:
            return {int(f[b"worker_index"]) for _, f in client.xrange(stream)} == {0, 1}

        wait_until(published_by_both, 120, f"batches from both workers in {stream}")
        client.close()
        kids = children(self.process.pid)
        workers = [pid for pid, cmd in kids.items() if "rolloutfleet.cli.main worker" in cmd]
        servers = [pid for pid, cmd in kids.items() if "redis-server" in cmd]
        learners = [pid for pid, cmd in kids.items() if pid not in workers + servers]
        self.started |= set(kids)
        assert len(workers) == 2 and len(servers) == 1, kids
        return {"workers": workers, "redis": servers, "learner": learners}


@contextmanager
def supervisor(tmp_path: Path, command: tuple[str, ...] = ()) -> Iterator[Supervisor]:
    sup = Supervisor(tmp_path, command)
    try:
        yield sup
    finally:
        started = sup.started | set(children(sup.process.pid))
        if sup.process.poll() is None:
            sup.process.kill()
            sup.process.wait()
        for pid in started:  # what the test started and a failing fleet left behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_sigterm_stops_the_fleet_like_ctrl_c(tmp_path: Path, signum: signal.Signals) -> None:
    """Defect: SIGTERM killed the supervisor at once and left both workers publishing."""
    with supervisor(tmp_path) as sup:
        pids = sup.running()
        sup.process.send_signal(signum)
        code = sup.process.wait(60)
        left = [pid for group in pids.values() for pid in group if alive(pid)]
        assert left == [], f"still running after the supervisor exited: {left}; {sup.stderr}"
        assert pids["learner"] == []
        assert code == 128 + signum, sup.stderr
        # Both workers finished their fragment and exited 0 (no "exit codes" reported).
        assert f"fleet: {signum.name}; stopping workers" in sup.stderr
        assert "fleet: stopped (2 workers)" in sup.stderr, sup.stderr


def test_workers_and_redis_exit_by_themselves_when_the_supervisor_is_killed(tmp_path: Path) -> None:
    """Defect: SIGKILL of the supervisor left its workers (and its Redis) running for good."""
    learner = ("--", sys.executable, "-c", "import time; time.sleep(600)")  # a learner that would never end
    with supervisor(tmp_path, learner) as sup:
        pids = sup.running()
        assert len(pids["learner"]) == 1
        sup.process.kill()
        sup.process.wait(30)
        everything = [pid for group in pids.values() for pid in group]
        deadline = time.monotonic() + 20  # a few seconds expected; generous on a loaded machine
        while time.monotonic() < deadline and any(alive(pid) for pid in everything):
            time.sleep(0.2)
        left = {kind: [pid for pid in group if alive(pid)] for kind, group in pids.items()}
        assert left == {"workers": [], "redis": [], "learner": []}, f"orphans 20 s after the SIGKILL: {left}"

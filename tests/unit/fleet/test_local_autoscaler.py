"""``rolloutfleet run``'s autoscaler: the rule's decisions carried out on the local fleet
(resize), one line per change or new kind of hold; and LocalFleet.resize on real processes
that stand in for workers (exit 0 on SIGTERM, as a worker does after its last fragment)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rolloutfleet.fleet import local_autoscaler
from rolloutfleet.fleet.local_autoscaler import LocalAutoscaler
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.rules.autoscale_signals import Signals
from rolloutfleet.spec.job import RolloutJob

STAND_IN = (
    "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print('up', flush=True); "
    "time.sleep(120)"
)


def job(replicas: int, **autoscaling: int) -> RolloutJob:
    spec = {"replicas": replicas, "env": {"id": "CartPole-v1"}}
    if autoscaling:
        spec["autoscaling"] = autoscaling
    return RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": spec})


class Recorded(LocalFleet):
    """A fleet that records resizes instead of starting processes."""

    def __init__(self, job: RolloutJob, tmp: Path) -> None:
        super().__init__(job, redis_url="redis://127.0.0.1:1/0", log_dir=tmp)
        self.sizes: list[int] = []

    def resize(self, replicas: int, now: float | None = None) -> None:
        self.sizes.append(replicas)
        self.workers = {i: self.workers.get(i) or type(next(iter(self.workers.values())))(i) for i in range(replicas)}


def test_idle_then_redis_away_one_line_each_and_the_fleet_resized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = iter(
        [Signals(now=0.0), Signals(now=5.0), Signals(now=12.0), Signals(now=13.0, error="redis unreachable: refused"),
         Signals(now=14.0, error="redis unreachable: refused")]
    )  # fmt: skip
    monkeypatch.setattr(local_autoscaler, "read_signals", lambda *args: next(looks))
    fleet = Recorded(job(3, minReplicas=0, maxReplicas=4, idleSeconds=10), tmp_path)
    scaler = LocalAutoscaler(fleet, look_s=1.0)
    lines = [scaler.tick(now) for now in (0.0, 0.5, 5.0, 12.0, 13.0, 14.0)]
    assert lines[1] is None  # not due yet: no look
    assert lines[0] == "autoscaling: waiting for the first heartbeat of 3 of 3 workers"
    assert lines[2] is None  # the same hold again: said once
    assert lines[3] == "autoscaling: no learner has read yet (idleSeconds 10): 3 -> 0 workers"
    assert lines[4] == "autoscaling: redis unreachable: refused: holding 0 workers" and lines[5] is None
    assert fleet.sizes == [0]


def test_a_job_without_autoscaling_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"spec\.autoscaling is not set"):
        LocalAutoscaler(LocalFleet(job(1), redis_url="redis://127.0.0.1:1/0", log_dir=tmp_path))


def test_resize_starts_new_indexes_and_stops_the_highest_gracefully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def spawn(self: LocalFleet, index: int, now: float) -> None:
        process = self.workers[index].process = subprocess.Popen(
            [sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE
        )
        assert process.stdout is not None and process.stdout.readline() == b"up\n"  # its SIGTERM handler is set
        self.workers[index].state = "running"
        self.tracker.started(index, now)

    monkeypatch.setattr(LocalFleet, "_spawn", spawn)
    fleet = LocalFleet(job(1), redis_url="redis://127.0.0.1:1/0", log_dir=tmp_path, grace_seconds=30)
    fleet.start()
    try:
        fleet.resize(3)
        assert sorted(fleet.workers) == [0, 1, 2] and fleet.alive() == 3
        removed = [fleet.workers[1].process, fleet.workers[2].process]
        fleet.resize(1)
        assert sorted(fleet.workers) == [0] and len(fleet.removing) == 2
        for process in removed:
            assert process is not None and process.wait(30) == 0  # SIGTERM: a clean exit, not a kill
        fleet.poll()
        assert fleet.removing == [] and fleet.restarts == 0 and fleet.workers[0].state == "running"
    finally:
        codes = fleet.stop()
    assert codes == {0: 0}


def test_while_idle_it_looks_more_often_so_a_returning_learner_is_seen_sooner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []

    def signals(*args: object) -> Signals:
        now = 100.0 + len(seen)
        seen.append(now)
        return Signals(now=now)  # no learner has read

    monkeypatch.setattr(local_autoscaler, "read_signals", signals)
    fleet = Recorded(job(2, minReplicas=0, maxReplicas=4, idleSeconds=10), tmp_path)
    scaler = LocalAutoscaler(fleet, look_s=2.0, idle_look_s=0.5)
    ticks = [0.0, 0.5, 1.0, 2.0, 10.0, 10.5, 11.0, 11.5]
    lines = [scaler.tick(now) for now in ticks]
    assert lines[4] == "autoscaling: no learner has read yet (idleSeconds 10): 2 -> 0 workers"
    # Active: a look every 2 s (0, 2, 10); idle from 10 s on: every 0.5 s (10.5, 11, 11.5).
    assert len(seen) == 6 and fleet.sizes == [0]


def test_due_in_tells_the_loop_how_long_it_may_wait_before_the_next_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_autoscaler, "read_signals", lambda *args: Signals(now=100.0))
    fleet = Recorded(job(2, minReplicas=0, maxReplicas=4, idleSeconds=10), tmp_path)
    scaler = LocalAutoscaler(fleet, look_s=2.0, idle_look_s=0.1)
    assert scaler.due_in(0.0) == 0.0  # never looked: due now
    scaler.tick(0.0)
    assert scaler.due_in(0.5) == pytest.approx(1.5)  # active: every 2 s
    assert scaler.due_in(3.0) == 0.0
    scaler.tick(10.0)  # idle from here (no learner for idleSeconds): every 0.1 s
    assert fleet.sizes == [0] and scaler.due_in(10.0) == pytest.approx(0.1)

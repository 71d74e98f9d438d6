"""``rolloutfleet run``'s table from heartbeats, without processes: who waits for a learner."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rolloutfleet.cli.run import fleet_line, status_table
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob


def job(replicas: int) -> RolloutJob:
    return RolloutJob.from_dict(
        {"metadata": {"name": "w"}, "spec": {"replicas": replicas, "env": {"id": "CartPole-v1"}}}
    )


def rendered(table: object) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_workers_waiting_for_a_learner_show_it_in_their_state_and_the_title(tmp_path: Path) -> None:
    fleet = LocalFleet(job(3), redis_url="redis://127.0.0.1:1/0", log_dir=tmp_path)
    for worker in fleet.workers.values():
        worker.state = "running"
    fleet.workers[2].state = "backoff"
    beats = {
        0: {"env_steps": 100.0, "steps_per_s": 0.0, "time": 995.0, "waiting_for_learner_since": 940.0},
        1: {"env_steps": 300.0, "steps_per_s": 50.0, "time": 999.0},
        2: {"env_steps": 50.0, "steps_per_s": 0.0, "time": 990.0, "waiting_for_learner_since": 900.0},  # restarting
    }
    assert fleet_line(fleet, beats, now=1000.0) == "2/3 workers up, 0 restarts, 1 waiting for a learner (for 60 s)"
    text = rendered(status_table(fleet, beats, elapsed=70.0, now=1000.0))
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("│")}
    assert "waiting for learner (60 s)" in rows["0"]
    assert "running" in rows["1"] and "waiting" not in rows["1"]
    assert "backoff" in rows["2"] and "waiting" not in rows["2"]
    # A waiting heartbeat nobody refreshed for over 30 s (its worker was killed) says nothing.
    stale = {0: {**beats[0], "time": 960.0}}
    assert fleet_line(fleet, stale, now=1000.0) == "2/3 workers up, 0 restarts"


def test_an_autoscaled_fleet_s_table_says_the_last_decision_in_its_caption(tmp_path: Path) -> None:
    fleet = LocalFleet(job(2), redis_url="redis://127.0.0.1:1/0", log_dir=tmp_path)
    reason = "learner starved 62 % of the last 60 s: 4 -> 6 workers"
    assert f"autoscaling: {reason}" in rendered(status_table(fleet, {}, elapsed=5.0, now=1000.0, scaling=reason))
    assert "autoscaling" not in rendered(status_table(fleet, {}, elapsed=5.0, now=1000.0))

"""What ``rolloutfleet run`` hands each worker process, read from its environment."""

from __future__ import annotations

from pathlib import Path

from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.sampling.vector.processes import CPUS_VARIABLE, usable_cpus
from rolloutfleet.spec.job import RolloutJob


def test_each_local_worker_is_told_its_share_of_the_machines_cpus(tmp_path: Path) -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "share"}, "spec": {"replicas": 2, "env": {"id": "CartPole-v1"}}})
    fleet = LocalFleet(job, redis_url="redis://127.0.0.1:1", log_dir=tmp_path)
    environ = fleet.worker_environ(1)
    assert environ[CPUS_VARIABLE] == str(max(1, usable_cpus() // 2))
    assert environ["ROLLOUTFLEET_WORKER_INDEX"] == "1"

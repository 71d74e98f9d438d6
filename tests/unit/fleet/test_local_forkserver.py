"""Which workers ``rolloutfleet run`` forks from the warm server, and what that server imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rolloutfleet.fleet import local_forkserver
from rolloutfleet.fleet.local_forkserver import PRELOAD
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob


def job(autoscaling: bool) -> RolloutJob:
    spec: dict[str, object] = {"replicas": 1, "env": {"id": "CartPole-v1"}}
    if autoscaling:
        spec["autoscaling"] = {"minReplicas": 0, "maxReplicas": 4}
    return RolloutJob.from_dict({"metadata": {"name": "start"}, "spec": spec})


def test_the_preloaded_modules_import_and_none_of_them_imports_torch() -> None:
    code = f"import sys\nfor m in {list(PRELOAD)!r}: __import__(m)\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]", result.stdout


@pytest.mark.skipif(
    not local_forkserver.available() and os.environ.get("CI") != "true",  # CI runs 3.11: there it must run
    reason="no fork server on this platform",
)
def test_autoscaled_jobs_fork_their_workers_fixed_ones_exec_them(tmp_path: Path) -> None:
    url = "redis://127.0.0.1:1/0"
    assert LocalFleet(job(True), redis_url=url, log_dir=tmp_path).start_method == "fork"
    assert LocalFleet(job(False), redis_url=url, log_dir=tmp_path).start_method == "exec"
    assert LocalFleet(job(True), redis_url=url, log_dir=tmp_path, start="exec").start_method == "exec"
    assert LocalFleet(job(False), redis_url=url, log_dir=tmp_path, start="fork").start_method == "fork"


def test_an_unknown_start_method_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="start must be auto, fork or exec, got 'spawn'"):
        LocalFleet(job(True), redis_url="redis://127.0.0.1:1/0", log_dir=tmp_path, start="spawn")

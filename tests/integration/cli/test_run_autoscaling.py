"""``rolloutfleet run`` with ``spec.autoscaling``, as a user runs it (a subprocess, the
embedded redis-server, a learner command): no learner yet -> 0 workers after idleSeconds;
the learner's first read brings a worker back; its starvation grows the fleet; one line
per decision on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]
LEARNER = """
import os, time
from rolloutfleet.transport.consumer import BatchConsumer
time.sleep(12)  # the fleet goes idle first
consumer = BatchConsumer(os.environ["ROLLOUTFLEET_REDIS_URL"], os.environ["ROLLOUTFLEET_JOB_NAME"], read_count=2)
began = time.monotonic()
while time.monotonic() - began < 45:
    if consumer.get(min_steps=40, timeout=0.5) is not None:
        time.sleep(40 / 500)  # 500 rows/s when fed: more than one worker makes
consumer.close()
"""


def test_run_goes_idle_wakes_at_the_learner_s_first_read_and_grows(tmp_path: Path) -> None:
    manifest = {
        "metadata": {"name": "elastic-run"},
        "spec": {
            "replicas": 2,
            "env": {"entryPoint": "tests.integration.fleet.paced_env:make", "config": {"step_s": 0.005}},
            "sampling": {"rolloutFragmentLength": 20},
            "redis": {"maxLen": 20, "backpressure": "block", "blockTimeoutSeconds": 2},
            "autoscaling": {"minReplicas": 0, "maxReplicas": 3, "idleSeconds": 5, "windowSeconds": 5,
                            "scaleDownSeconds": 5},
        },
    }  # fmt: skip
    path = tmp_path / "elastic.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(path), "--no-status", "--",
         sys.executable, "-c", LEARNER],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.startswith("fleet: autoscaling: ")]
    assert result.returncode == 0, result.stderr
    changes = [line for line in lines if " -> " in line]
    assert changes[0] == "fleet: autoscaling: no learner has read yet (idleSeconds 5): 2 -> 0 workers", lines
    assert changes[1].startswith("fleet: autoscaling: a learner reads again (") and changes[1].endswith(
        "0 -> 2 workers"
    ), lines
    assert any(line.startswith("fleet: autoscaling: learner starved ") and "2 -> 3 workers" in line for line in changes)
    assert "Traceback" not in result.stderr


def test_replicas_outside_the_autoscaling_bounds_is_said_not_silently_clamped(tmp_path: Path, redis_url: str) -> None:
    manifest = {
        "metadata": {"name": "bounded"},
        "spec": {"env": {"id": "CartPole-v1"}, "autoscaling": {"minReplicas": 1, "maxReplicas": 2}},
    }
    path = tmp_path / "bounded.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(path), "--redis", redis_url, "--no-status",
         "--replicas", "50", "--duration", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = "fleet: --replicas 50 is outside spec.autoscaling's bounds (1-2): starting 2"
    assert said in result.stderr.splitlines(), result.stderr
    assert any(line.startswith("fleet: 2 workers of bounded") for line in result.stderr.splitlines()), result.stderr

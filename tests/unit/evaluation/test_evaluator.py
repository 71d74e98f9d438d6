"""The evaluation worker process, as the operator's pod starts it, on input it cannot use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rolloutfleet.evaluation.evaluator import is_evaluator

ROOT = Path(__file__).resolve().parents[3]


def test_the_role_variable_makes_a_worker_an_evaluator() -> None:
    assert is_evaluator({"ROLLOUTFLEET_ROLE": "evaluator"})
    assert not is_evaluator({}) and not is_evaluator({"ROLLOUTFLEET_ROLE": "worker"})


def test_an_env_it_cannot_build_is_one_line_and_exit_3(tmp_path: Path) -> None:
    spec = {"env": {"id": "NoSuchEnv-v0"}, "evaluation": {"workers": 1}}
    env = {**os.environ, "ROLLOUTFLEET_ROLE": "evaluator", "ROLLOUTFLEET_JOB_NAME": "j", "ROLLOUTFLEET_WORKER_INDEX": "0",
           "ROLLOUTFLEET_NUM_WORKERS": "1", "ROLLOUTFLEET_SPEC": json.dumps(spec), "ROLLOUTFLEET_METRICS_PORT": "0",
           "ROLLOUTFLEET_REDIS_URL": "redis://127.0.0.1:1/0",
           "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination-log")}  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], cwd=ROOT, env=env,
                            capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert result.returncode == 3
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("rolloutfleet worker: spec.env.id: ") and "NoSuchEnv" in line
    assert "Traceback" not in result.stderr
    assert (tmp_path / "termination-log").read_text().strip() == line.removeprefix("rolloutfleet worker: ")

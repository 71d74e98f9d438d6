"""`rolloutfleet run` with an evaluation worker that cannot run (an `evaluation.envConfig` its
env's constructor refuses): the worker's one line in run's own output at once, naming the
field; the run ends with exit 3, not 0; and the logs, evaluation worker's included, are kept
where the line says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
MANIFEST = """\
kind: RolloutJob
metadata: {name: evbroken}
spec:
  replicas: 1
  env: {id: CartPole-v1}
  redis: {maxLen: 4, backpressure: dropOldest}
  evaluation: {workers: 1, episodes: 2, envConfig: {bogus_kwarg: 1}}
"""


def test_an_evaluation_worker_that_cannot_run_is_said_at_once_and_the_run_exits_3_with_its_logs_kept(
    redis_url: str, tmp_path: Path
) -> None:
    manifest = tmp_path / "evbroken.yaml"
    manifest.write_text(MANIFEST)
    argv = [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status"]
    result = subprocess.run([*argv, "--duration", "12"], capture_output=True, text=True, timeout=120, check=False)
    err = result.stderr
    assert result.returncode == 3, err
    started = next(line for line in err.splitlines() if line.startswith("fleet: 1 worker of evbroken"))
    assert started.endswith("(removed after a clean run)"), started
    said = [line for line in err.splitlines() if line.startswith("fleet: evaluation worker 0 cannot run: ")]
    assert len(said) == 1, err
    assert "spec.evaluation.envConfig: building the environment failed" in said[0] and "bogus_kwarg" in said[0]
    kept = next(line for line in err.splitlines() if "the logs are kept in" in line)
    folder = Path(kept.rsplit(" ", 1)[1])
    assert folder.is_dir() and "bogus_kwarg" in (folder / "evaluator-0.log").read_text()
    assert f"(log: {folder / 'evaluator-0.log'})" in said[0]
    assert "Traceback" not in err

"""`rolloutfleet run` with an env whose observation space no policy takes (gymnasium's Text):
the real worker refuses it, and the run stops once with that line and exit 3, without
spending the restart budget on starts that would fail the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ENV = """\
import gymnasium as gym
from gymnasium import spaces


class TextEnv(gym.Env):
    observation_space = spaces.Text(8)
    action_space = spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return "a", {}

    def step(self, action):
        return "a", 0.0, False, False, {}


def make(config=None):
    return TextEnv()
"""
MANIFEST = """\
kind: RolloutJob
metadata: {name: textobs}
spec:
  replicas: 2
  env: {entryPoint: "textenv:make"}
  restartPolicy: {maxRestarts: 5, backoffSeconds: 0.2, backoffLimitSeconds: 1}
"""


def test_an_env_no_policy_can_take_stops_the_run_once_without_restarts(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "textenv.py").write_text(ENV)
    manifest = tmp_path / "textobs.yaml"
    manifest.write_text(MANIFEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--redis", redis_url, "--no-status"],
        capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "restarting in" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    down = [line for line in result.stderr.splitlines() if line.startswith("fleet: every worker is down")]
    assert len(down) == 1 and "unsupported observation space Text(" in down[0], result.stderr

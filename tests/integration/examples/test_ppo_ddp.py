"""`make demo-ddp`'s learner for real: `rolloutfleet run` (a real redis-server and two real
workers) and `torchrun` with two PPO ranks (gloo): every update has the same number of rows
on each rank, both learn, and both stop together once the episodes of all ranks average
the target (here a low one: a few updates)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]
MANIFEST = "examples/cartpole-ddp.yaml"


def test_two_ranks_learn_from_one_fleet_in_lock_step_and_stop_together() -> None:
    learner = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "rolloutfleet.examples.ppo_ddp", MANIFEST, "--target-return", "60", "--max-env-steps", "400000"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", MANIFEST, "--no-status", "--", *learner],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "with 2 ranks of 2048 rows an update" in out, out[-3000:]
    solved = next(line for line in out.splitlines() if "ppo-ddp: solved" in line)
    steps = int(solved.split(" after ")[1].split()[0])
    rows = next(line for line in out.splitlines() if "rows learned by each rank" in line)
    # Lock step: each rank learned from half of the env steps counted, exactly.
    assert rows.endswith(f"[{steps // 2}, {steps // 2}]"), (rows, solved)

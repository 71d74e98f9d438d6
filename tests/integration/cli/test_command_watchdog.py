"""``validate``, ``sample`` (and ``evaluate``) build and step the job's env in their own
process: an env call that hangs past ``spec.env.callTimeoutSeconds`` ends them as it ends a
worker, exit 3 with one line naming the sub-env and the call. Before, they hung for ever."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def manifest(tmp_path: Path, hang: str, hang_env: int) -> Path:
    path = tmp_path / "hangs.yaml"
    path.write_text(yaml.safe_dump({
        "metadata": {"name": "hangs"},
        "spec": {"env": {"entryPoint": "tests.unit.sampling.poison_envs:make_hanging_env", "numEnvs": 2,
                         "callTimeoutSeconds": 1, "config": {"hang_env": hang_env, "hang": hang, "after": 3}},
                 "sampling": {"rolloutFragmentLength": 10}},
    }))  # fmt: skip
    return path


def run(*argv: Any) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rolloutfleet.cli.main", *map(str, argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    return done, time.monotonic() - started


def test_validate_with_a_constructor_that_hangs_ends_with_exit_3_and_one_line(tmp_path: Path) -> None:
    done, _ = run("validate", manifest(tmp_path, "constructor", 0))
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rolloutfleet validate: "), done.stderr
    assert "sub-env 0" in lines[0] and "constructor" in lines[0] and "callTimeoutSeconds" in lines[0], lines


def test_sample_with_a_step_that_hangs_ends_with_exit_3_and_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "out.npz"
    done, _ = run("sample", manifest(tmp_path, "step", 1), "--steps", "200", "--output", output)
    assert done.returncode == 3, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("rolloutfleet sample: ") and "sub-env 1" in line and "step" in line, done.stderr
    assert not output.exists()

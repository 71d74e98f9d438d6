"""`rolloutfleet evaluate`'s bad input: one line naming what is wrong, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rolloutfleet.cli.main", "evaluate", *args], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip


def manifest(tmp_path: Path, evaluation: str = "{}") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"kind: RolloutJob\nmetadata: {{name: x}}\nspec: {{env: {{id: CartPole-v1}}, evaluation: {evaluation}}}\n"
    )
    return str(path)


def test_no_episodes_is_refused(tmp_path: Path) -> None:
    result = run(manifest(tmp_path), "--episodes", "0")
    assert (result.returncode, result.stderr) == (2, "rolloutfleet evaluate: --episodes must be >= 1\n")


def test_a_bad_evaluation_field_is_named(tmp_path: Path) -> None:
    result = run(manifest(tmp_path, "{episodes: 0}"), "--redis", "redis://127.0.0.1:1/0")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "spec.evaluation.episodes" in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    result = run(manifest(tmp_path), "--redis", "redis://127.0.0.1:1/0", "--timeout", "0.5")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("rolloutfleet evaluate: ") and "127.0.0.1:1" in result.stderr

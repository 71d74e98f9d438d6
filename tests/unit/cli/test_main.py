"""The CLI as a user runs it: a subprocess, a manifest on disk, a file numpy can read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_sample_writes_a_plain_npz(tmp_path: Path) -> None:
    output = tmp_path / "out" / "cartpole.npz"
    result = run("sample", "examples/cartpole.yaml", "--steps", "1000", "--output", str(output))
    assert result.returncode == 0, result.stderr
    with np.load(output, allow_pickle=False) as data:
        assert len(data["obs"]) == 1000
        assert data["obs"].shape[1] == 4
        assert set(data.files) >= {
            "obs",
            "new_obs",
            "actions",
            "rewards",
            "terminateds",
            "truncateds",
            "eps_id",
            "weights_seq_no",
        }
        assert np.all(data["env_id"] < 8)


def test_sample_on_a_multi_agent_manifest_writes_policy_slash_column(tmp_path: Path) -> None:
    output = tmp_path / "tag.npz"
    result = run("sample", "examples/multiagent.yaml", "--steps", "400", "--output", str(output))
    assert result.returncode == 0, result.stderr
    assert "agent steps over 400 env steps" in result.stdout
    with np.load(output, allow_pickle=False) as data:
        assert {"red/obs", "red/new_obs", "red/agent_id", "blue/actions", "blue/agent_index"} <= set(data.files)
        assert set(data["red/agent_id"].tolist()) == {"red_0", "red_1"}
        assert len(data["red/obs"]) == 2 * 400  # two red agents act in every env step
        assert all(agent.startswith("blue_") for agent in data["blue/agent_id"].tolist())


def test_sample_pong_example_writes_stacked_preprocessed_frames(tmp_path: Path) -> None:
    output = tmp_path / "pong.npz"
    result = run("sample", "examples/pong.yaml", "--steps", "512", "--output", str(output))
    assert result.returncode == 0, result.stderr
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"].shape == (512, 4, 84, 84) and data["obs"].dtype == np.uint8
        np.testing.assert_array_equal(data["new_obs"][:, :3], data["obs"][:, 1:])  # one new frame per step
        assert set(np.unique(data["actions"]).tolist()) <= set(range(6))
        assert set(np.unique(data["rewards"]).tolist()) <= {-1.0, 0.0, 1.0}


def test_a_bad_manifest_is_one_line_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "kind: RolloutJob\nmetadata: {name: x}\nspec: {env: {id: CartPole-v1}, sampling: {batchMode: nope}}\n"
    )
    result = run("sample", str(bad), "--steps", "10", "--output", str(tmp_path / "x.npz"))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "spec.sampling.batchMode" in result.stderr
    assert not (tmp_path / "x.npz").exists()
    env_fails = tmp_path / "env.yaml"
    env_fails.write_text("kind: RolloutJob\nmetadata: {name: x}\nspec: {env: {entryPoint: 'nosuchmod:make'}}\n")
    result = run("sample", str(env_fails), "--steps", "10", "--output", str(tmp_path / "x.npz"))
    assert result.returncode == 2
    assert "spec.env.entryPoint" in result.stderr
    assert "Traceback" not in result.stderr


def manifest(tmp_path: Path, spec: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"kind: RolloutJob\nmetadata: {{name: x}}\nspec: {spec}\n")
    return str(path)


def test_validate_estimates_sizes_and_refuses_what_cannot_work_naming_the_field(tmp_path: Path) -> None:
    ok = run("validate", manifest(tmp_path, "{env: {id: CartPole-v1, numEnvs: 8}}"))
    assert ok.returncode == 0, ok.stderr
    assert "is valid (a model of 4,675 parameters, about" in ok.stdout
    for spec, field in [
        ("{env: {id: CartPole-v1}, policy: {hidden: [100000, 100000]}}", "spec.policy.hidden"),
        ("{env: {id: CartPole-v1}, sampling: {rolloutFragmentLength: 1000000000}}", "spec.sampling.rolloutFragmentLength"),
        ("{env: {id: CartPole-v1, numEnvs: 64}, sampling: {rolloutFragmentLength: 20000}}",
         "spec.sampling.rolloutFragmentLength"),
        ("{env: {id: CartPole-v1}, policy: {hidden: [4096, 4096]}, resources: {memory: 64Mi}}", "spec.resources.memory"),
        # The evaluation env is built with its own envConfig (CartPole's constructor takes no such argument).
        ("{env: {id: CartPole-v1}, evaluation: {workers: 1, envConfig: {bogus_kwarg: 1}}}", "spec.evaluation.envConfig"),
    ]:  # fmt: skip
        refused = run("validate", manifest(tmp_path, spec))
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.count("\n") == 1 and f"job.yaml: {field}:" in refused.stderr, refused.stderr
    spec_only = run("validate", "--spec-only", manifest(tmp_path, "{env: {entryPoint: 'nosuchmod:make'}}"))
    assert spec_only.returncode == 0 and "sizes not checked" in spec_only.stdout


def test_log_level_flag_then_environment_then_info_for_a_worker_warning_for_the_rest() -> None:
    from rolloutfleet.cli.main import log_level

    assert log_level(None, {}, "worker") == "INFO"  # a pod's worker says when it starts, waits, stops
    assert log_level(None, {}, "run") == "WARNING"
    assert log_level(None, {"ROLLOUTFLEET_LOG_LEVEL": "debug"}, "worker") == "DEBUG"
    assert log_level("error", {"ROLLOUTFLEET_LOG_LEVEL": "debug"}, "worker") == "ERROR"
    assert log_level("loud", {}, "worker") is None


def test_a_bad_log_level_is_one_line_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    from rolloutfleet.cli.main import main

    assert main(["--log-level", "loud", "validate", "examples/cartpole.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "rolloutfleet: log level 'loud' (--log-level or ROLLOUTFLEET_LOG_LEVEL) is not one of "
        "DEBUG, INFO, WARNING, ERROR, CRITICAL"
    )


def test_sample_reports_the_file_it_wrote(tmp_path: Path) -> None:
    result = run("sample", "examples/cartpole.yaml", "--steps", "50", "--output", str(tmp_path / "noext"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"to {tmp_path / 'noext.npz'}"), result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext.npz"]


def test_sample_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path: Path) -> None:
    from tests import disk_kit

    with disk_kit.tiny_disk(tmp_path, size="16k") as disk:
        result = run("sample", "examples/cartpole.yaml", "--steps", "2000", "--output", str(disk / "big.npz"))
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip() == f"rolloutfleet sample: cannot write {disk / 'big.npz'}: No space left on device"
        assert list(disk.iterdir()) == []

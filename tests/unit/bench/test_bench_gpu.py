"""The GPU bench's frame env and its CPU path; the GPU column says why it is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.inference.device import usable_cuda_devices


def test_frames_env_serves_atari_shaped_stacks_with_next_step_resets() -> None:
    from bench.frames_env import FramesVectorEnv

    env = FramesVectorEnv(num_envs=3, length=2)
    obs, _ = env.reset()
    assert obs.shape == (3, 4, 84, 84) and obs.dtype == np.uint8
    assert env.single_observation_space.contains(obs[0])
    rewards, ends = [], []
    for _ in range(6):
        obs, reward, terminated, truncated, _ = env.step(np.zeros(3, np.int64))
        rewards.append(reward.tolist())
        ends.append(terminated.tolist())
        assert not truncated.any()
    # two steps, an end, then the reset step (reward 0, no end): gymnasium's NEXT_STEP autoreset
    assert [r[0] for r in rewards] == [1, 1, 0, 1, 1, 0]
    assert [e[0] for e in ends] == [False, True, False, False, True, False]
    assert not np.array_equal(obs[0], obs[1])  # sub-envs see different frames
    with pytest.raises(ValueError, match="integers in"):
        env.step(np.full(3, 6))


def test_a_cnn_policy_samples_the_frames() -> None:
    import bench.frames_env  # noqa: F401  # registers the id

    spec = {
        "env": {"id": "RolloutFleetFrames-v0", "numEnvs": 2, "vectorization": "vector", "config": {"length": 3}},
        "policy": {"device": "cpu"},
        "sampling": {"rolloutFragmentLength": 4},
    }
    batch = EnvRunner(RolloutJob.from_dict({"metadata": {"name": "f"}, "spec": spec})).sample()
    assert batch["obs"].shape[1:] == (4, 84, 84) and batch["obs"].dtype == np.uint8
    assert batch["action_dist_inputs"].shape[1] == 6  # the CNN's logits over the 6 actions
    assert (batch["t"] <= 2).all()  # 3-step episodes


@pytest.mark.skipif(usable_cuda_devices() > 0, reason="a GPU is here: the bench measures it (slow); see make bench")
def test_without_a_gpu_the_bench_says_why_and_measures_the_cpu(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bench_gpu",
            "--envs",
            "2",
            "--seconds",
            "0.05",
            "--repeats",
            "1",
            "--only",
            "cnn",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "GPU column not measured: no CUDA device" in run.stdout
    row = run.stdout.strip().splitlines()[-2].split()
    assert row[0] == "2" and float(row[2].replace(",", "")) > 0  # envs, ceiling, ours on the cpu
    assert row[3] == "-"
    (table,) = json.loads((tmp_path / "bench_gpu.json").read_text())["tables"]
    assert table["rows"][0]["envs"] == 2 and table["rows"][0]["cpu"] > 0 and table["rows"][0]["gpu"] is None

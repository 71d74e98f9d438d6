"""Sampling with the policy on a CUDA device: every row as the same weights give on the CPU
(feed-forward MLP and CNN, recurrent LSTM and GRU).

These need a GPU (CI has none: they skip there, with the reason); ``make bench`` measures the
same jobs' speed (``bench/bench_gpu.py``).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob, SampleBatch
from rolloutfleet.inference.device import usable_cuda_devices
from tests.unit.sampling.test_recurrent_sampling import collect, episodes, replay

pytestmark = pytest.mark.skipif(usable_cuda_devices() == 0, reason="no usable CUDA device on this machine")


def runner(env: dict[str, Any], policy: dict[str, Any], device: str) -> EnvRunner:
    spec = {"env": env, "policy": {**policy, "device": device}, "sampling": {"seed": 0, "rolloutFragmentLength": 8}}
    return EnvRunner(RolloutJob.from_dict({"metadata": {"name": "gpu"}, "spec": spec}))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def check_rows_against_the_cpu(gpu: EnvRunner, cpu: EnvRunner, batch: SampleBatch, tol: float) -> None:
    cpu.policy.set_weights(gpu.policy.get_weights())
    dist_inputs, values = cpu.policy.forward(batch["obs"])
    np.testing.assert_allclose(batch["action_dist_inputs"], dist_inputs, rtol=tol, atol=tol)
    np.testing.assert_allclose(batch["vf_preds"], values, rtol=tol, atol=tol)
    # each row's logp is its action's under the logits it recorded
    logp = log_softmax(batch["action_dist_inputs"])[np.arange(len(batch)), batch["actions"]]
    np.testing.assert_allclose(batch["action_logp"], logp, rtol=1e-4, atol=1e-4)


def test_mlp_256x256_on_the_gpu_acts_for_every_sub_env() -> None:
    env = {"id": "CartPole-v1", "numEnvs": 64}
    gpu, cpu = runner(env, {"hidden": [256, 256]}, "cuda"), runner(env, {"hidden": [256, 256]}, "cpu")
    assert (gpu.policy.device, gpu.policy.inference) == ("cuda", "torch")
    batch = gpu.sample()
    assert len(batch) == 64 * 8 and set(batch["actions"].tolist()) <= {0, 1}
    check_rows_against_the_cpu(gpu, cpu, batch, tol=1e-4)


def test_nature_cnn_on_the_gpu_acts_on_frame_stacks() -> None:
    import bench.frames_env  # noqa: F401  # registers RolloutFleetFrames-v0

    env = {"id": "RolloutFleetFrames-v0", "numEnvs": 16, "vectorization": "vector"}
    gpu, cpu = runner(env, {}, "cuda"), runner(env, {}, "cpu")
    batch = gpu.sample()
    assert batch["obs"].shape == (16 * 8, 4, 84, 84)
    # cuDNN convolves in TF32 by default (torch.backends.cudnn.allow_tf32): ~1e-3 relative
    check_rows_against_the_cpu(gpu, cpu, batch, tol=5e-3)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_a_recurrent_policy_on_the_gpu_carries_each_sub_envs_state(cell: str) -> None:
    """Every row's recorded state_in is what replaying its episode on the CPU gives, with the
    GPU's weights: the state stays on its sub-env across steps, resets and fragments."""
    env = {"id": "CartPole-v1", "numEnvs": 32}
    policy = {"hidden": [64], "recurrent": {"cell": cell, "size": 32}, "stateOut": True}
    gpu, cpu = runner(env, policy, "cuda"), runner(env, policy, "cpu")
    assert (gpu.policy.device, gpu.policy.recurrent) == ("cuda", True)
    batch = collect(gpu, 4)
    cpu.policy.set_weights(gpu.policy.get_weights())
    found = episodes(batch)
    rows = sum(replay(cpu.policy.torch_model(), episode, atol=1e-4) for episode in found)
    assert len(found) >= 8 and rows >= 300
    assert any(len(np.unique(episode["call"])) > 1 for episode in found), "no episode crossed a fragment"
    assert np.abs(batch["state_in_0"][batch["t"] > 0]).max() > 1e-3


def test_async_env_processes_forked_beside_a_gpu_runners_garbage_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Env processes forked from a worker whose uncollected garbage holds a GPU runner (its
    tensors, pinned buffers, streams), and that collect garbage themselves: they sample
    (freeing such objects in a forked child aborts it: 'CUDA error: initialization error')."""
    from rolloutfleet.sampling.vector.processes import CPUS_VARIABLE

    monkeypatch.setenv(CPUS_VARIABLE, "2")
    env = {"entryPoint": "tests.unit.sampling.poison_envs:make_collecting_env", "numEnvs": 4, "vectorization": "async"}
    gc.disable()  # the garbage outlives the fork
    try:
        old = runner({"id": "CartPole-v1", "numEnvs": 8}, {"hidden": [64]}, "cuda")
        old.sample()
        cycle: list[Any] = [old, old.policy]
        cycle.append(cycle)
        del cycle, old
        gpu = runner(env, {}, "cuda")
        assert (gpu.policy.device, len(gpu.env.unwrapped._procs)) == ("cuda", 2)
        assert len(gpu.sample()) == 4 * 8
        gpu.close()
    finally:
        gc.enable()

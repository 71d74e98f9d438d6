"""Policy: which model acts (numpy or torch), what that costs in imports, and that every
worker and the learner start from the same weights whichever it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.inference.default_mlp import MLPLayout, initial_weights
from rolloutfleet.inference.device import driver_device_count, usable_cuda_devices
from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.models import DefaultModel
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, RolloutJob, SpecError

ROOT = Path(__file__).resolve().parents[3]
NO_GPU = "no CUDA device on this machine (CI has none)"


def imports_after(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its torch modules and the ``result`` it set."""
    script = f"import json, sys\n{code}\nprint(json.dumps({{'torch': sorted(m for m in sys.modules if m.split('.')[0] == 'torch'), 'result': result}}))"
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


SAMPLE = """
from rolloutfleet import EnvRunner, RolloutJob
job = RolloutJob.from_dict({{"metadata": {{"name": "cp"}}, "spec": {{"env": {{"id": "{env}", "numEnvs": 4}},
    "policy": {policy}, "sampling": {{"rolloutFragmentLength": 20}}}}}})
runner = EnvRunner(job)
batch = runner.sample()
weights = runner.get_weights()["default"]
runner.set_weights("default", {{k: v * 0 for k, v in weights.items()}}, seq_no=1)
runner.sample()
result = [runner.policy.inference, runner.policy.device, len(batch)]
"""


@pytest.mark.skipif(driver_device_count() > 0, reason="on a GPU machine `auto` picks the GPU, which needs torch")
@pytest.mark.parametrize("env", ["CartPole-v1", "FrozenLake-v1", "Pendulum-v1"])
def test_a_default_mlp_on_the_cpu_samples_and_loads_weights_without_importing_torch(env: str) -> None:
    seen = imports_after(SAMPLE.format(env=env, policy="{}"))
    assert seen["torch"] == [] and seen["result"] == ["numpy", "cpu", 80]


@pytest.mark.parametrize(
    "policy",
    [
        '{"inference": "torch"}',
        '{"entryPoint": "tests.unit.sampling.sampler_test_policies:AlwaysRight"}',
    ],
)
def test_a_torch_policy_or_a_custom_module_imports_torch(policy: str) -> None:
    seen = imports_after(SAMPLE.format(env="CartPole-v1", policy=policy))
    assert "torch" in seen["torch"] and seen["result"][0] == "torch"


def job(seed: int, **policy: Any) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "cp"},
            "spec": {"env": {"id": "Pendulum-v1", "numEnvs": 2}, "policy": policy, "sampling": {"seed": seed}},
        }
    )


def test_workers_and_the_learner_start_from_the_same_weights_in_numpy_and_in_torch() -> None:
    from rolloutfleet import EnvRunner

    numpy_worker = EnvRunner(job(3, vfShareLayers=False)).get_weights()["default"]
    torch_worker = EnvRunner(job(3, vfShareLayers=False, inference="torch")).get_weights()["default"]
    learner = {name: t.numpy() for name, t in build_model(job(3, vfShareLayers=False)).state_dict().items()}
    assert list(numpy_worker) == list(torch_worker) == list(learner)
    assert "log_std" in learner and "critic_trunk.1.weight" in learner
    for name, value in learner.items():
        np.testing.assert_array_equal(numpy_worker[name], value)
        np.testing.assert_array_equal(torch_worker[name], value)
    other_seed = EnvRunner(job(4, vfShareLayers=False)).get_weights()["default"]
    assert not np.array_equal(other_seed["pi.weight"], numpy_worker["pi.weight"])


def test_numpy_and_torch_policies_act_alike_on_the_same_weights() -> None:
    obs_space, act_space = spaces.Box(-1, 1, (3,)), spaces.Box(-2, 2, (2,))
    fast = Policy(PolicySpec(hidden=[16, 16], device="cpu"), obs_space, act_space, init_seed=5)
    slow = Policy(PolicySpec(hidden=[16, 16], device="cpu", inference="torch"), obs_space, act_space, init_seed=7)
    assert (fast.inference, slow.inference) == ("numpy", "torch")
    trained = {name: value + np.float32(0.05) for name, value in slow.get_weights().items()}
    fast.set_weights(trained)
    slow.set_weights({name: torch.from_numpy(value) for name, value in trained.items()})  # tensors load too
    obs = np.random.default_rng(0).uniform(-1, 1, (9, 3)).astype(np.float32)
    for ours, reference in zip(fast.forward(obs), slow.forward(obs), strict=True):
        np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-5)
    # The learner's module for a numpy policy holds its current weights.
    module = fast.torch_model()
    for name, tensor in module.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), trained[name])


def test_weights_that_do_not_fit_leave_a_numpy_policy_as_it_was() -> None:
    policy = Policy(PolicySpec(), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    before = policy.get_weights()
    wrong = {**before, "pi.weight": np.zeros((3, 64), np.float32)}
    with pytest.raises(ValueError, match=r"'pi\.weight' has shape \(3, 64\), expected \(2, 64\)"):
        policy.set_weights(wrong, seq_no=1)
    with pytest.raises(ValueError, match=r"missing \['vf\.bias'\]"):
        policy.set_weights({k: v for k, v in before.items() if k != "vf.bias"}, seq_no=1)
    assert policy.weights_seq_no == 0
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name])


def test_weights_checked_ahead_load_as_they_are_only_into_a_model_of_the_signature_they_were_checked_for() -> None:
    from rolloutfleet.data.weights_check import CheckedWeights, WeightsRefused, check_weights

    policy = Policy(PolicySpec(), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    other = Policy(PolicySpec(hidden=[8]), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    own = policy.weights_signature()
    ahead = CheckedWeights(check_weights({k: v + 1 for k, v in policy.get_weights().items()}, own), own)
    assert policy.set_weights(ahead)  # checked for this signature: loaded as they are
    np.testing.assert_array_equal(policy.get_weights()["pi.bias"], ahead["pi.bias"])
    with pytest.raises(WeightsRefused, match="do not fit the model"):
        other.set_weights(ahead)  # another model checks them as any weights


@pytest.mark.parametrize("inference", ["auto", "torch"])
def test_nan_or_wrongly_typed_weights_are_refused_by_numpy_and_torch_policies(inference: str) -> None:
    from rolloutfleet.data.weights_check import WeightsRefused

    policy = Policy(PolicySpec(inference=inference), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    before = policy.get_weights()
    with pytest.raises(WeightsRefused, match=r"'vf\.bias' holds 1 NaN/inf values"):
        policy.set_weights({**before, "vf.bias": np.array([np.nan], np.float32)}, seq_no=1)
    with pytest.raises(WeightsRefused, match=r"'pi\.bias' has dtype bool, expected float32"):
        policy.set_weights({**before, "pi.bias": np.zeros(2, bool)}, seq_no=1)
    assert policy.weights_seq_no == 0
    for name, value in policy.get_weights().items():
        np.testing.assert_array_equal(value, before[name])
    assert policy.set_weights({k: v.astype(np.float64) for k, v in before.items()}, seq_no=1)


def test_initial_weights_are_orthogonal_with_their_gains_and_zero_biases() -> None:
    act = spaces.Discrete(3)
    layout = MLPLayout.of(spaces.Box(-1, 1, (5,)), distribution_for(act), [32, 8])
    weights = initial_weights(layout, seed=11)
    for name, gain in [("actor_trunk.1.weight", 2**0.5), ("actor_trunk.3.weight", 2**0.5), ("pi.weight", 0.01)]:
        w = weights[name].astype(np.float64)
        small = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w  # orthonormal along the shorter side
        np.testing.assert_allclose(small, gain**2 * np.eye(len(small)), atol=1e-5)
    assert all(not weights[name].any() for name in weights if name.endswith(".bias"))
    # DefaultModel takes the same arrays for the same seed, and torch.manual_seed still
    # decides them when no seed is given.
    model = DefaultModel(spaces.Box(-1, 1, (5,)), act, distribution_for(act), hidden=[32, 8], init_seed=11)
    for name, tensor in model.state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), weights[name])
    torch.manual_seed(1)
    first = DefaultModel(spaces.Box(-1, 1, (5,)), act, distribution_for(act)).state_dict()["pi.weight"]
    torch.manual_seed(1)
    again = DefaultModel(spaces.Box(-1, 1, (5,)), act, distribution_for(act)).state_dict()["pi.weight"]
    assert torch.equal(first, again)


CUDA_WITHOUT_GPU = """
from gymnasium import spaces
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, SpecError
try:
    Policy(PolicySpec(device="cuda"), spaces.Box(-1, 1, (4,)), spaces.Discrete(2))
    result = "built"
except SpecError as exc:
    result = str(exc)
"""


@pytest.mark.skipif(driver_device_count() > 0, reason="this machine has a CUDA device")
def test_cuda_without_a_gpu_is_one_spec_error_before_torch_is_imported() -> None:
    seen = imports_after(CUDA_WITHOUT_GPU)
    assert seen["torch"] == []
    assert seen["result"] == "spec.policy.device: 'cuda' asked for, but no CUDA device is available on this node"


def test_auto_without_a_usable_gpu_runs_on_the_cpu_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    if usable_cuda_devices():
        pytest.skip("this machine has a usable CUDA device")
    from rolloutfleet.inference import device

    device._log_cpu_fallback.cache_clear()
    with caplog.at_level("INFO", logger="rolloutfleet.inference.device"):
        policy = Policy(PolicySpec(device="auto"), spaces.Box(-1, 1, (4,)), spaces.Discrete(2))
    assert policy.device == "cpu"
    assert any("the policy runs on the CPU" in record.getMessage() for record in caplog.records)


@pytest.mark.skipif(driver_device_count() == 0, reason=NO_GPU)
def test_auto_on_a_gpu_machine_acts_in_torch_on_the_gpu() -> None:
    policy = Policy(PolicySpec(device="auto"), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    assert (policy.device, policy.inference) == ("cuda", "torch")
    cpu = Policy(PolicySpec(device="cpu"), spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=0)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    np.testing.assert_allclose(policy.forward(obs)[0], cpu.forward(obs)[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(SpecError, match="only"):
        Policy(PolicySpec(device=f"cuda:{usable_cuda_devices()}"), spaces.Box(-1, 1, (4,)), spaces.Discrete(2))


# -- Dict observations and action masks ---------------------------------------------------

CLASSIC = spaces.Dict(
    {"observation": spaces.Box(0, 1, (3, 3, 2), np.int8), "action_mask": spaces.Box(0, 1, (9,), np.int8)}
)


@pytest.mark.parametrize("explore", [False, True])
def test_masked_actions_are_legal_and_equal_in_the_numpy_and_torch_paths(explore: bool) -> None:
    rng = np.random.default_rng(1)
    boards = rng.integers(0, 2, (256, 3, 3, 2)).astype(np.int8)
    masks = rng.random((256, 9)) < 0.4
    masks[np.arange(256), rng.integers(0, 9, 256)] = True  # one legal move at least
    outputs = []
    for inference in ("auto", "torch"):
        spec = PolicySpec(hidden=[16], device="cpu", inference=inference)
        policy = Policy(spec, CLASSIC, spaces.Discrete(9), seed=3, init_seed=4)
        weights = policy.get_weights()
        weights["pi.bias"][:] = np.arange(9, dtype=np.float32)  # the model prefers high actions, legal or not
        policy.set_weights(weights)
        actions, logp, dist_inputs, _ = policy.act(explore)(boards, masks)
        assert masks[np.arange(256), actions].all(), inference
        outputs.append((policy.inference, actions, logp, dist_inputs))
    (numpy_kind, a_np, lp_np, d_np), (torch_kind, a_t, lp_t, d_t) = outputs
    assert (numpy_kind, torch_kind) == ("numpy", "torch")
    np.testing.assert_allclose(d_np, d_t, rtol=1e-4, atol=1e-5)  # unmasked logits are what the batch stores
    np.testing.assert_array_equal(a_np, a_t)
    np.testing.assert_allclose(lp_np, lp_t, rtol=1e-4, atol=1e-5)


def test_random_actions_under_a_mask_are_uniform_over_the_legal_ones() -> None:
    policy = Policy(PolicySpec(hidden=[8]), CLASSIC, spaces.Discrete(9), seed=0)
    mask = np.zeros((3000, 9), np.bool_)
    mask[:, [2, 5, 7]] = True
    actions, logp, _, _ = policy.random_actions(3000, mask)
    assert set(np.unique(actions)) == {2, 5, 7}
    np.testing.assert_allclose(logp, -np.log(3.0), rtol=1e-6)


@pytest.mark.parametrize("explore", [True, False])
def test_compute_actions_takes_the_mask_too(explore: bool) -> None:
    policy = Policy(PolicySpec(hidden=[8]), spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(5), seed=0)
    obs = np.random.default_rng(2).uniform(-1, 1, (500, 3)).astype(np.float32)
    mask = np.zeros((500, 5), np.bool_)
    mask[:, 2] = True
    assert (policy.compute_actions(obs, explore, mask).actions == 2).all()

"""vectorization: envpool keeps our batch semantics: EnvPool's CartPole-v1 against CartPole's
published dynamics (as the gymnasium vectorizations are tested), episode boundaries,
time limits, seeds; Pong through EnvPool; one line for what EnvPool does not have."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np
import pytest

from rolloutfleet import EnvRunner, RolloutJob, SampleBatch, SpecError
from tests.unit.sampling.test_env_runner import cartpole_step, out_of_bounds

if importlib.util.find_spec("envpool") is None:  # in requirements.lock: `make install` installs it
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("envpool is not installed (requirements.lock has it: `make install`)", pytrace=False)
    pytest.skip("envpool is not installed (`make install`)", allow_module_level=True)


def job(env: dict[str, Any], fragment: int = 100, seed: int = 0) -> RolloutJob:
    spec = {"env": {"vectorization": "envpool", **env}, "sampling": {"seed": seed, "rolloutFragmentLength": fragment}}
    return RolloutJob.from_dict({"metadata": {"name": "ep"}, "spec": spec})


def test_envpool_cartpole_transitions_follow_the_dynamics() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 4}))
    batch = SampleBatch.concat([runner.sample(), runner.sample()])
    assert len(batch) == 800
    np.testing.assert_allclose(batch["new_obs"], cartpole_step(batch["obs"], batch["actions"]), rtol=1e-4, atol=1e-4)
    ended = batch["terminateds"]
    assert ended.any()
    np.testing.assert_array_equal(ended, out_of_bounds(batch["new_obs"]))  # the final observation is the true one
    starts = batch["obs"][batch["t"] == 0]
    assert len(starts) > 4 and np.all(np.abs(starts) <= 0.05)


def test_envpool_no_row_crosses_an_episode_boundary() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 3}, fragment=50))
    batch = SampleBatch.concat([runner.sample() for _ in range(4)])
    for chunk in batch.split_by_episode():
        np.testing.assert_array_equal(np.diff(chunk["t"]), 1)
        np.testing.assert_array_equal(chunk["new_obs"][:-1], chunk["obs"][1:])
        assert not (chunk["terminateds"][:-1] | chunk["truncateds"][:-1]).any()


def test_envpool_truncation_at_its_time_limit() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 2, "config": {"max_episode_steps": 7}}, fragment=40))
    batch = runner.sample()
    truncated = batch["truncateds"] & ~batch["terminateds"]
    assert truncated.any() and np.all(batch["t"][truncated] == 6)
    np.testing.assert_allclose(
        batch["new_obs"][truncated], cartpole_step(batch["obs"][truncated], batch["actions"][truncated]), atol=1e-4
    )


def test_envpool_seeds_reproduce_and_differ_per_seed() -> None:
    def first_obs(seed: int) -> np.ndarray:
        runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 2}, fragment=5, seed=seed))
        try:
            return runner.sample()["obs"]
        finally:
            runner.close()

    np.testing.assert_array_equal(first_obs(1), first_obs(1))
    assert not np.array_equal(first_obs(1), first_obs(2))


def test_pong_through_envpool_samples_stacked_frames() -> None:
    runner = EnvRunner(job({"id": "ALE/Pong-v5", "numEnvs": 2}, fragment=20))
    try:
        batch = runner.sample()
    finally:
        runner.close()
    assert batch["obs"].shape == (40, 4, 84, 84) and batch["obs"].dtype == np.uint8
    np.testing.assert_array_equal(batch["new_obs"][:, :3], batch["obs"][:, 1:])  # EnvPool stacks 4 frames
    assert np.isfinite(batch["vf_preds"]).all()


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"id": "MountainCarContinuous-v9"},
            r"^spec\.env\.vectorization: EnvPool has no env 'MountainCarContinuous-v9'",
        ),
        ({"id": "CartPole-v1", "config": {"stack": 4}}, r"^spec\.env\.config: EnvPool's CartPole-v1 refuses it"),
    ],
)
def test_what_envpool_cannot_do_is_one_line(env: dict[str, Any], says: str) -> None:
    with pytest.raises(SpecError, match=says) as error:
        EnvRunner(job(env))
    assert "\n" not in str(error.value)


def test_envpool_outputs_pass_the_observation_check_and_a_wrong_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """EnvPool's real outputs pass the check (the tests above sample through it); a step whose
    observations lost a column (as a mismatched EnvPool build might) is a vector env failure."""
    from rolloutfleet.sampling.vector.envpool import EnvPoolVectorEnv
    from rolloutfleet.sampling.vector.make import EnvFailed

    step = EnvPoolVectorEnv.step

    def short_rows(self: EnvPoolVectorEnv, actions: Any) -> Any:
        obs, *rest = step(self, actions)
        return (obs[:, :3], *rest)

    monkeypatch.setattr(EnvPoolVectorEnv, "step", short_rows)
    with pytest.raises(EnvFailed) as failed:
        EnvRunner(job({"id": "CartPole-v1", "numEnvs": 4, "maxConsecutiveFailures": 2})).sample()
    assert "the vector env's step returned an observation of shape (4, 3), expected (4, 4)" in str(failed.value)

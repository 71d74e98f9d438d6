"""Stateful policies: each row's recorded state_in is what replaying its episode gives.

The replay runs the acting model itself, one observation at a time from the episode's first
row and the model's initial state, so it shares nothing with the runner's bookkeeping (which
sub-env a row came from, autoreset modes, fragments cut mid-episode, batched forward passes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rolloutfleet import RolloutJob, SpecError
from rolloutfleet.data.batch import SampleBatch, state_columns
from rolloutfleet.inference.recurrent_model import RecurrentModel
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner


def cartpole_job(vectorization: str = "vector", **policy: Any) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "lstm"},
            "spec": {
                "env": {"id": "CartPole-v1", "numEnvs": 3, "vectorization": vectorization},
                "policy": {"hidden": [16], "device": "cpu", "recurrent": {"cell": "lstm", "size": 8}, **policy},
                "sampling": {"rolloutFragmentLength": 15, "seed": 5},
            },
        }
    )


def collect(runner: EnvRunner, calls: int, **kwargs: Any) -> SampleBatch:
    """Several fragments, each row tagged with the sample() call that returned it."""
    batches = []
    for call in range(calls):
        batch = runner.sample(**kwargs)
        batches.append(SampleBatch({**batch, "call": np.full(len(batch), call)}))
    return SampleBatch.concat(batches)


def episodes(batch: SampleBatch, key: str = "eps_id") -> list[SampleBatch]:
    """Each episode (or multi-agent trajectory) whose first row is in the batch, in time order."""
    keys = batch[key] if key == "eps_id" else batch["eps_id"] * 1000 + batch["agent_index"]
    found = []
    for value in np.unique(keys):
        rows = batch.rows(np.flatnonzero(keys == value))
        rows = rows.rows(np.argsort(rows["t"], kind="stable"))
        if rows["t"][0] == 0:
            assert np.array_equal(rows["t"], np.arange(len(rows))), "an episode's rows have gaps"
            found.append(rows)
    return found


def replay(model: torch.nn.Module, episode: SampleBatch, atol: float = 1e-5) -> int:
    """Step the model through the episode's observations from its initial state; assert each
    row's state_in (state_out, model outputs) equal the replay's, within ``atol``. Returns rows
    checked."""
    names = state_columns(episode)
    state = [part[None] for part in model.initial_state()]
    assert len(names) == len(state)
    with torch.no_grad():
        for i in range(len(episode)):
            for name, part in zip(names, state, strict=True):
                np.testing.assert_allclose(episode[name][i], part[0].numpy(), atol=atol, err_msg=f"{name} row {i}")
            out, values, state = model(torch.as_tensor(episode["obs"][i : i + 1]), state)
            np.testing.assert_allclose(episode["action_dist_inputs"][i], out[0].numpy(), atol=atol)
            np.testing.assert_allclose(episode["vf_preds"][i], values[0].numpy(), atol=atol)
            for k, part in enumerate(state):
                if f"state_out_{k}" in episode:
                    np.testing.assert_allclose(episode[f"state_out_{k}"][i], part[0].numpy(), atol=atol)
    return len(episode)


@pytest.mark.parametrize(
    ("vectorization", "cell"),
    [("vector", "lstm"), ("sync", "gru"), ("sync", "lstm")],
    ids=["next-step-autoreset-lstm", "same-step-autoreset-gru", "same-step-autoreset-lstm"],
)
def test_every_rows_state_in_is_the_replay_of_its_episode_from_the_start(vectorization: str, cell: str) -> None:
    job = cartpole_job(vectorization, recurrent={"cell": cell, "size": 8}, stateOut=True)
    with EnvRunner(job) as runner:
        batch = collect(runner, 6)
        model = runner.policy.torch_model()
    assert isinstance(model, RecurrentModel)
    assert runner.env.metadata["autoreset_mode"].name == ("NEXT_STEP" if vectorization == "vector" else "SAME_STEP")
    found = episodes(batch)
    rows = sum(replay(model, episode) for episode in found)
    spanning = [episode for episode in found if len(np.unique(episode["call"])) > 1]
    assert len(found) >= 8 and rows >= 150
    assert spanning, "no episode was cut across fragments: the carried state went untested"
    assert (batch["state_in_0"][batch["t"] == 0] == 0).all()
    assert np.abs(batch["state_in_0"][batch["t"] > 0]).max() > 1e-3  # the state is not trivially zero


@pytest.mark.parametrize(
    "policy",
    [{"explore": False}, {"exploration": {"type": "epsilonGreedy", "epsilon": 0.5}}],
    ids=["greedy", "epsilon-greedy"],
)
def test_state_is_recorded_whatever_the_exploration(policy: dict[str, Any]) -> None:
    with EnvRunner(cartpole_job(**policy)) as runner:
        batch = collect(runner, 3)
        model = runner.policy.torch_model()
    assert sum(replay(model, episode) for episode in episodes(batch)) > 40
    greedy = batch["actions"] == batch["action_dist_inputs"].argmax(axis=1)
    if policy.get("explore") is False:
        assert greedy.all()
    else:
        assert (batch["exploration_scale"] == 0.5).all()
        assert 0.6 < greedy.mean() < 0.9  # about 1 - ε/2 (ε's uniform draw picks the argmax half the time)


def test_random_actions_still_step_the_state() -> None:
    with EnvRunner(cartpole_job()) as runner:
        batch = collect(runner, 3, random_actions=True)
        model = runner.policy.torch_model()
    found = episodes(batch)
    assert sum(len(episode) for episode in found) > 40
    for episode in found:
        names = state_columns(episode)
        state = [part[None] for part in model.initial_state()]
        with torch.no_grad():
            for i in range(len(episode)):
                for name, part in zip(names, state, strict=True):
                    np.testing.assert_allclose(episode[name][i], part[0].numpy(), atol=1e-5)
                _, _, state = model(torch.as_tensor(episode["obs"][i : i + 1]), state)


def custom_job(entry_point: str, vectorization: str = "sync") -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "custom"},
            "spec": {
                "env": {"id": "CartPole-v1", "numEnvs": 2, "vectorization": vectorization},
                "policy": {"entryPoint": entry_point, "device": "cpu"},
                "sampling": {"rolloutFragmentLength": 30, "seed": 2},
            },
        }
    )


@pytest.mark.parametrize("vectorization", ["vector", "sync"])
def test_a_custom_models_state_restarts_with_each_episode(vectorization: str) -> None:
    """StepCounter's state counts steps since the episode began and sums the first observation
    component: facts of the env's own rows (t, obs), whatever sub-env or fragment they are in."""
    with EnvRunner(custom_job("tests.unit.sampling.sampler_test_policies:StepCounter", vectorization)) as runner:
        batch = collect(runner, 4)
    assert runner.policy.recurrent and runner.policy.inference == "torch"
    np.testing.assert_array_equal(batch["state_in_0"][:, 0], batch["t"])
    np.testing.assert_array_equal(batch["vf_preds"], batch["t"])
    for episode in episodes(batch):
        before = np.r_[0.0, np.cumsum(episode["obs"][:-1, 0], dtype=np.float32)]
        np.testing.assert_allclose(episode["state_in_1"][:, 0], before, rtol=1e-5, atol=1e-5)


def test_a_model_whose_state_changes_shape_is_one_line_naming_the_policy() -> None:
    shape_error = r"^spec\.policy: the model's state changed shape between calls"
    with (
        EnvRunner(custom_job("tests.unit.sampling.sampler_test_policies:ShapeShifter")) as runner,
        pytest.raises(SpecError, match=shape_error) as exc,
    ):
        runner.sample()
    assert "\n" not in str(exc.value)


def test_default_feed_forward_policy_has_no_state_columns() -> None:
    job = cartpole_job()
    plain = job.model_copy(
        update={"spec": job.spec.model_copy(update={"policy": job.spec.policy.model_copy(update={"recurrent": None})})}
    )
    with EnvRunner(plain) as runner:
        batch = runner.sample()
    assert runner.policy.inference == "numpy" and not runner.policy.recurrent
    assert state_columns(batch) == []


def multiagent_job(env_config: dict[str, Any]) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "ma-lstm"},
            "spec": {
                "env": {
                    "entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk",
                    "numEnvs": 2,
                    "config": env_config,
                },
                "policy": {"hidden": [8], "device": "cpu"},
                "multiAgent": {
                    "policies": {"even": {"recurrent": {"cell": "lstm", "size": 6}, "stateOut": True}, "odd": {}},
                    "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:even_odd"},
                },
                "sampling": {"rolloutFragmentLength": 5, "seed": 3},
            },
        }
    )


@pytest.mark.parametrize(
    "env_config",
    [{"agents": 4, "length": 9}, {"agents": 4, "length": 9, "turns": True}, {"agents": 4, "late": True}],
    ids=["simultaneous", "turn-based", "agent-joins-and-leaves"],
)
def test_multiagent_state_is_per_agent_and_replays(env_config: dict[str, Any]) -> None:
    with MultiAgentEnvRunner(multiagent_job(env_config)) as runner:
        parts = [runner.sample().by_policy() for _ in range(5)]
        model = runner.policies["even"].torch_model()
    even = SampleBatch.concat(
        SampleBatch({**part["even"], "call": np.full(len(part["even"]), call)}) for call, part in enumerate(parts)
    )
    odd = SampleBatch.concat(part["odd"] for part in parts)
    assert state_columns(odd) == [] and state_columns(even) == ["state_in_0", "state_in_1"]
    found = episodes(even, key="agent")
    assert sum(replay(model, trajectory) for trajectory in found) >= 30
    assert any(len(np.unique(trajectory["call"])) > 1 for trajectory in found), "no trajectory spans fragments"
    assert len(np.unique(even["agent_index"])) >= 2  # several agents, each with its own state


@pytest.mark.parametrize("kind", ["gaussian", "ornsteinUhlenbeck"])
def test_noise_exploration_on_continuous_actions_with_a_recurrent_model(kind: str) -> None:
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "pendulum-lstm"},
            "spec": {
                "env": {"id": "Pendulum-v1", "numEnvs": 2},
                "policy": {
                    "hidden": [8],
                    "device": "cpu",
                    "recurrent": {"cell": "lstm", "size": 4},
                    "exploration": {"type": kind, "sigma": 0.3},
                },
                "sampling": {"rolloutFragmentLength": 20, "seed": 1},
            },
        }
    )
    with EnvRunner(job) as runner:
        batch = collect(runner, 3)
        model = runner.policy.torch_model()
    assert sum(replay(model, episode) for episode in episodes(batch)) == 120  # 2 envs x 60 steps, all from t = 0
    mean = batch["action_dist_inputs"][:, :1]
    assert (batch["exploration_scale"] == 0.3).all()
    assert np.abs(batch["actions"] - np.clip(mean, -2, 2)).max() > 0.05  # noise was added to the mean
    assert (np.abs(batch["actions"]) <= 2).all()


def test_multiagent_state_with_dict_observations_and_action_masks_replays() -> None:
    """Tic-tac-toe's Dict observations (board and action mask), players acting in turns, a
    recurrent policy: moves only on empty cells, each row's state_in the replay of its
    player's game through the model's input (the board leaf)."""
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "ttt-lstm"},
            "spec": {
                "env": {"id": "pettingzoo.classic.tictactoe_v3", "numEnvs": 2},
                "policy": {"hidden": [8], "device": "cpu", "recurrent": {"cell": "gru", "size": 4}},
                "multiAgent": {
                    "policies": {"default": {}},
                    "policyMapping": {"rules": [{"regex": ".*", "policy": "default"}]},
                },
                "sampling": {"rolloutFragmentLength": 12, "seed": 1},
            },
        }
    )
    with MultiAgentEnvRunner(job) as runner:
        batch = SampleBatch.concat([runner.sample().by_policy()["default"] for _ in range(3)])
        policy = runner.policies["default"]
        model = policy.torch_model()
    assert batch["action_mask"][np.arange(len(batch)), batch["actions"]].all()
    replayed = SampleBatch({**batch, "obs": policy.obs_parts.batch_input(batch)})
    assert sum(replay(model, game) for game in episodes(replayed, key="agent")) >= 12


def test_state_replays_after_a_vector_env_fails_on_its_reset_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """NEXT_STEP autoreset: the vector env raises on the reset step that follows its episodes'
    end (4th step, episodes of 3). The rebuilt env's episodes replay from their first row: the
    state is not restarted again one step into them."""
    from tests.unit.sampling.sampler_test_envs import CounterVectorEnv

    monkeypatch.setattr(CounterVectorEnv, "failures_left", 1)
    job = RolloutJob.from_dict(
        {
            "metadata": {"name": "lstm-crash"},
            "spec": {
                "env": {"id": "RolloutFleetCounterVec-v0", "numEnvs": 2, "config": {"length": 3, "fail_at": 4}},
                "policy": {"hidden": [8], "device": "cpu", "recurrent": {"cell": "lstm", "size": 4}},
                "sampling": {"rolloutFragmentLength": 12, "seed": 2},
            },
        }
    )
    with EnvRunner(job) as runner:
        batch = runner.sample()
        model = runner.policy.torch_model()
    assert runner.get_metrics()["num_env_restarts"] == 1
    found = episodes(batch)
    assert len(found) >= 6 and all(len(episode) == 3 for episode in found)
    assert sum(replay(model, episode) for episode in found) >= 18

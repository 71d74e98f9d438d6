"""MultiAgentEnvRunner: per-agent transitions, mapping, joining/leaving agents, counting, weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from rolloutfleet import Callbacks, RolloutJob, SpecError
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.examples.team_tag import MOVES
from rolloutfleet.fleet.runner_factory import build_policy_models
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner

EVEN_ODD = {
    "policies": {"even": {}, "odd": {"hidden": [16]}},
    "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:even_odd"},
}


def job(
    env: dict[str, Any] | None = None,
    multi: dict[str, Any] | None = None,
    sampling: dict[str, Any] | None = None,
    **policy: Any,
) -> RolloutJob:
    env = env or {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk", "numEnvs": 2}
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "ma"},
            "spec": {
                "env": env,
                "policy": {"hidden": [8], "device": "cpu", **policy},
                "multiAgent": multi or EVEN_ODD,
                "sampling": {"rolloutFragmentLength": 5, "seed": 3, **(sampling or {})},
            },
        }
    )


def trajectories(batch: SampleBatch) -> list[SampleBatch]:
    """Rows grouped by (eps_id, agent_index), checking they are contiguous and in time order."""
    keys = list(zip(batch["eps_id"].tolist(), batch["agent_index"].tolist(), strict=True))
    runs: list[SampleBatch] = []
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start]:
            runs.append(batch.rows(slice(start, i)))
            start = i
    assert len(runs) == len(set(keys)), "a trajectory's rows are not contiguous"
    return runs


def test_rows_follow_the_envs_own_dynamics_per_agent() -> None:
    runner = MultiAgentEnvRunner(job())
    batch = runner.sample()
    assert sorted(batch) == ["even", "odd"]
    for policy_id, part in batch.items():
        assert len(part) > 0
        # The env's rule: the position moves by action - 1 and the reward is the action.
        np.testing.assert_array_equal(part["new_obs"][:, 0], part["obs"][:, 0] + part["actions"] - 1)
        np.testing.assert_array_equal(part["rewards"], part["actions"].astype(np.float32))
        # An agent's new_obs is its own (agent number) next observation (one env step later).
        np.testing.assert_array_equal(part["new_obs"][:, 1], part["obs"][:, 1])
        np.testing.assert_array_equal(part["new_obs"][:, 2], part["obs"][:, 2] + 1)
        for run in trajectories(part):
            np.testing.assert_array_equal(run["obs"][1:], run["new_obs"][:-1])
            assert run["t"].tolist() == list(range(int(run["t"][0]), int(run["t"][0]) + len(run)))
        # agent_id and agent_index agree with the mapping function
        assert set(part["agent_id"].tolist()) == ({"a0"} if policy_id == "even" else {"a1"})
        ids = np.asarray(batch.agent_ids)[part["agent_index"]]
        np.testing.assert_array_equal(ids, part["agent_id"])


def test_episode_ends_close_every_agent_and_no_row_crosses_episodes() -> None:
    runner = MultiAgentEnvRunner(job(sampling={"batchMode": "complete_episodes"}))
    batch = runner.sample()
    for part in batch.values():
        for run in trajectories(part):
            assert run["t"][0] == 0 and len(run) == 8  # WalkEnv episodes: 8 steps
            assert run["truncateds"][-1] and not run["truncateds"][:-1].any()
            assert not run["terminateds"].any()
    assert batch.env_steps() % 8 == 0 and batch.env_steps() >= 10


def test_truncate_counts_env_steps_and_keeps_open_rows_for_the_next_batch() -> None:
    runner = MultiAgentEnvRunner(job())
    first, second = runner.sample(), runner.sample()
    assert first.env_steps() == second.env_steps() == 5 * 2
    assert first.agent_steps() == 2 * 5 * 2  # two agents per sub-env, each acting every step
    # The episode (8 steps) continues across batches with the same eps_id and rising t.
    a0 = SampleBatch.concat([first["even"], second["even"]])
    env0 = a0.rows(a0["env_id"] == 0)
    assert env0["t"].tolist()[:8] == list(range(8))


class StepRecorder(Callbacks):
    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []  # (kind, env_index, eps_id)
        self.rewards: dict[int, float] = {}
        self.returns: dict[int, float] = {}

    def on_episode_start(self, *, env_index: int, eps_id: int, **kwargs: Any) -> None:
        self.events.append(("start", env_index, eps_id))

    def on_episode_step(
        self, *, env_index: int, eps_id: int, action: Any, reward: Any, new_obs: Any, **kw: Any
    ) -> None:
        self.events.append(("step", env_index, eps_id))
        assert set(action) == set(reward) == set(new_obs) == {"a0", "a1"}
        for agent, obs in new_obs.items():  # the env's rule: position += action - 1, reward = action
            assert reward[agent] == action[agent]
            assert obs[1] == int(agent[1:])
        self.rewards[eps_id] = self.rewards.get(eps_id, 0.0) + sum(reward.values())

    def on_episode_end(self, *, env_index: int, eps_id: int, episode_return: float, **kwargs: Any) -> None:
        self.events.append(("end", env_index, eps_id))
        self.returns[eps_id] = episode_return


def test_multi_agent_callbacks_see_every_step_in_order() -> None:
    recorder = StepRecorder()
    runner = MultiAgentEnvRunner(job(sampling={"rolloutFragmentLength": 10}), callbacks=recorder)
    batch = runner.sample()
    assert batch.env_steps() == 20
    for env in (0, 1):
        kinds = [(kind, eps) for kind, j, eps in recorder.events if j == env]
        # start, 8 steps, end, start, 2 steps (WalkEnv episodes last 8 env steps)
        first, second = kinds[0][1], kinds[10][1]
        assert (
            kinds
            == [("start", first), *[("step", first)] * 8, ("end", first), ("start", second)] + [("step", second)] * 2
        )
    assert recorder.returns and all(recorder.returns[e] == recorder.rewards[e] for e in recorder.returns)


def test_agent_steps_counting() -> None:
    multi = {**EVEN_ODD, "countStepsBy": "agent_steps"}
    runner = MultiAgentEnvRunner(job(multi=multi, sampling={"rolloutFragmentLength": 7}))
    batch = runner.sample()
    assert 14 <= batch.agent_steps() < 14 + 4  # at most one vector step of agents past the target
    assert batch.env_steps() == 2 * -(-batch.agent_steps() // 4)


def test_num_episodes_returns_exactly_that_many() -> None:
    runner = MultiAgentEnvRunner(job())
    batch = runner.sample(num_episodes=3)
    episodes = {int(e) for part in batch.values() for e in part["eps_id"]}
    assert len(episodes) == 3 and batch.env_steps() == 3 * 8


def test_agents_joining_and_leaving_mid_episode() -> None:
    env = {
        "entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk",
        "numEnvs": 1,
        "config": {"late": True, "join": 3, "leave": 6},
    }
    multi = {
        "policies": {"walkers": {}, "late": {}},
        "policyMapping": {"rules": [{"prefix": "a", "policy": "walkers"}], "default": "late"},
    }
    runner = MultiAgentEnvRunner(job(env=env, multi=multi, sampling={"batchMode": "complete_episodes"}))
    late = runner.sample(num_episodes=2)["late"]
    for run in trajectories(late):
        # Joins after step 3 (its first observation says so), acts 3 times, leaves terminated.
        assert run["obs"][0, 2] == 3 and run["t"].tolist() == [0, 1, 2]
        assert run["terminateds"].tolist() == [False, False, True] and not run["truncateds"].any()
        np.testing.assert_array_equal(run["new_obs"][:, 0], run["obs"][:, 0] + run["actions"] - 1)
    assert len(trajectories(late)) == 2


def test_turn_based_agents_collect_rewards_until_they_act_again() -> None:
    env = {
        "entryPoint": "tests.unit.sampling.multiagent_test_envs:make_walk",
        "numEnvs": 2,
        "config": {"turns": True, "length": 9},
    }
    runner = MultiAgentEnvRunner(job(env=env, sampling={"batchMode": "complete_episodes"}))
    batch = runner.sample()
    for part in batch.values():
        for run in trajectories(part):
            # Acts every other step: its next observation comes two env steps later.
            np.testing.assert_array_equal(run["new_obs"][:-1, 2], run["obs"][:-1, 2] + 2)
            number = int(run["obs"][0, 1])
            waited = run["new_obs"][:, 2] - run["obs"][:, 2] - 1  # steps it only watched
            np.testing.assert_array_equal(run["rewards"], run["actions"] + 10 * number * waited)


def test_pettingzoo_parallel_env() -> None:
    env = {
        "entryPoint": "tests.unit.sampling.multiagent_test_envs:make_pettingzoo_walk",
        "numEnvs": 2,
        "config": {"late": True},
    }
    multi = {"policies": {"p": {}}, "policyMapping": {"rules": [{"regex": ".*", "policy": "p"}]}}
    runner = MultiAgentEnvRunner(job(env=env, multi=multi, sampling={"batchMode": "complete_episodes"}))
    part = runner.sample(num_episodes=2)["p"]
    assert set(part["agent_id"].tolist()) == {"a0", "a1", "late"}
    for run in trajectories(part):
        np.testing.assert_array_equal(run["new_obs"][:, 0], run["obs"][:, 0] + run["actions"] - 1)
        assert run["terminateds"][-1] or run["truncateds"][-1]


def test_team_tag_transitions_follow_its_moves_and_teams_map_by_rules() -> None:
    runner = MultiAgentEnvRunner(RolloutJob.from_file("examples/multiagent.yaml"))
    batch = runner.sample()
    assert set(batch["red"]["agent_id"].tolist()) == {"red_0", "red_1"}
    assert set(batch["blue"]["agent_id"].tolist()) == {"blue_0", "blue_1", "blue_2"}
    size = 7
    for part in batch.values():
        pos = np.rint((part["obs"][:, :2] + 1) / 2 * (size - 1))
        new_pos = np.rint((part["new_obs"][:, :2] + 1) / 2 * (size - 1))
        np.testing.assert_array_equal(new_pos, np.clip(pos + MOVES[part["actions"]], 0, size - 1))
        for run in trajectories(part):
            np.testing.assert_array_equal(run["obs"][1:], run["new_obs"][:-1])
    tagged = batch["blue"]["terminateds"] & (batch["blue"]["rewards"] < 0)
    assert tagged.any(), "some blue was tagged (and left the episode)"
    metrics = runner.get_metrics()
    assert {"agent/red_0/episode_return_mean", "policy/blue/episode_return_mean"} <= set(metrics)


def test_rllib_style_team_tag_gives_the_same_rows_as_the_parallel_one() -> None:
    base = RolloutJob.from_file("examples/multiagent.yaml").to_dict()
    results = []
    for entry in ("make_env", "make_rllib_env"):
        manifest = {
            **base,
            "spec": {
                **base["spec"],
                "env": {**base["spec"]["env"], "entryPoint": f"rolloutfleet.examples.team_tag:{entry}"},
            },
        }
        batch = MultiAgentEnvRunner(RolloutJob.from_dict(manifest)).sample(num_episodes=4)
        results.append(
            {p: (b["obs"].copy(), b["terminateds"].copy(), b["truncateds"].copy()) for p, b in batch.items()}
        )
    for policy in results[0]:
        for left, right in zip(results[0][policy], results[1][policy], strict=True):
            np.testing.assert_array_equal(left, right)


def test_a_per_episode_mapping_keeps_an_agent_in_one_policy_per_episode() -> None:
    multi = {**EVEN_ODD, "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:per_episode_swap"}}
    batch = MultiAgentEnvRunner(job(multi=multi)).sample(num_episodes=4)
    seen: dict[tuple[int, str], str] = {}
    for policy_id, part in batch.items():
        for eps, agent in zip(part["eps_id"].tolist(), part["agent_id"].tolist(), strict=True):
            assert seen.setdefault((eps, agent), policy_id) == policy_id
    sides = {policy for (_, agent), policy in seen.items() if agent == "a0"}
    assert sides == {"even", "odd"}, "a0 played both sides over the episodes"


def test_a_mapping_to_an_unknown_policy_names_agent_and_policy() -> None:
    multi = {**EVEN_ODD, "policyMapping": {"entryPoint": "tests.unit.sampling.multiagent_test_envs:unknown_policy"}}
    with pytest.raises(SpecError, match=r"policyMapping\.entryPoint.*agent 'a1' to policy 'green'"):
        MultiAgentEnvRunner(job(multi=multi)).sample()


def test_rules_without_a_match_or_default_are_an_error() -> None:
    multi = {"policies": {"p": {}}, "policyMapping": {"rules": [{"prefix": "zz", "policy": "p"}]}}
    with pytest.raises(SpecError, match=r"policyMapping\.rules: no rule matches agent 'a0'"):
        MultiAgentEnvRunner(job(multi=multi))


def test_per_policy_weights_update_independently() -> None:
    runner = MultiAgentEnvRunner(job())
    before = runner.get_weights()
    zeros = {name: np.zeros_like(value) for name, value in before["odd"].items()}
    assert runner.set_weights("odd", zeros, 4)
    assert runner.weights_seq_nos == {"even": 0, "odd": 4}
    assert not runner.set_weights("odd", before["odd"], seq_no=3), "an older version is not loaded"
    after = runner.get_weights()
    for name, value in before["even"].items():
        np.testing.assert_array_equal(after["even"][name], value)
    assert all((value == 0).all() for value in after["odd"].values())
    batch = runner.sample()
    assert set(batch["odd"]["weights_seq_no"].tolist()) == {4}
    assert set(batch["even"]["weights_seq_no"].tolist()) == {0}
    assert batch.weights_seq_nos == {"even": 0, "odd": 4}
    assert (batch["odd"]["vf_preds"] == 0).all() and not (batch["even"]["vf_preds"] == 0).all()


def test_policies_get_their_overrides_and_workers_start_alike() -> None:
    a, b = MultiAgentEnvRunner(job(), worker_index=0), MultiAgentEnvRunner(job(), worker_index=1)
    assert a.policies["odd"].spec.hidden == [16] and a.policies["even"].spec.hidden == [8]
    for policy in ("even", "odd"):
        for name, value in a.get_weights([policy])[policy].items():
            np.testing.assert_array_equal(value, b.get_weights([policy])[policy][name])
    learner = build_policy_models(job())
    for name, tensor in learner["odd"].state_dict().items():
        np.testing.assert_array_equal(tensor.numpy(), a.get_weights(["odd"])["odd"][name])


def test_a_failing_sub_env_is_rebuilt_and_its_episode_dropped() -> None:
    runner = MultiAgentEnvRunner(job())
    runner.sample()
    broken = runner.subenvs[1].env.env

    def explode(actions: Any) -> Any:
        raise RuntimeError("boom")

    broken.step = explode
    batch = runner.sample()
    metrics = runner.get_metrics()
    assert metrics["num_env_restarts"] == 1 and metrics["num_episodes_dropped"] == 1
    for part in batch.values():
        for run in trajectories(part):
            np.testing.assert_array_equal(run["obs"][1:], run["new_obs"][:-1])


def test_single_agent_runner_refuses_a_multi_agent_job() -> None:
    with pytest.raises(SpecError, match=r"spec\.multiAgent"):
        EnvRunner(job())


def test_mean_std_filter_per_policy_normalizes_what_its_agents_saw() -> None:
    # Uniform actions from one seed: the unfiltered twin shows the raw observations.
    sampling = {"rolloutFragmentLength": 8, "observationFilter": "meanStd"}
    filtered = MultiAgentEnvRunner(job(sampling=sampling))
    raw = MultiAgentEnvRunner(job(sampling={"rolloutFragmentLength": 8}))
    first = filtered.sample(random_actions=True)
    first_raw = raw.sample(random_actions=True)
    for policy_id in ("even", "odd"):
        np.testing.assert_array_equal(first[policy_id]["actions"], first_raw[policy_id]["actions"])
        # An agent's first row was normalized by the statistics of the two reset observations
        # (one per sub-env) that had arrived for its policy: (x - mean) / std, clipped.
        starts = first_raw[policy_id].rows(first_raw[policy_id]["t"] == 0)["obs"]
        assert len(starts) == 2
        expected = (starts - starts.mean(axis=0)) / (starts.std(axis=0, ddof=1) + 1e-8)
        got = first[policy_id].rows(first[policy_id]["t"] == 0)["obs"]
        np.testing.assert_allclose(got, np.clip(expected, -10, 10), rtol=1e-5, atol=1e-6)
    for _ in range(5):
        batch = filtered.sample(random_actions=True)
        for part in batch.values():
            for run in trajectories(part):
                np.testing.assert_array_equal(run["obs"][1:], run["new_obs"][:-1])  # filtered once, used twice
    # 2 sub-envs x 6 episodes of 8 steps: per agent 7 resets + 48 steps arrived, each counted once.
    for policy_id in ("even", "odd"):
        assert filtered.filters[policy_id].stats.count == 2 * (7 + 48)
    assert filtered.get_state()["filters"].keys() == {"even", "odd"}


def test_mean_std_filter_needs_box_observations() -> None:
    env = {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_discrete_obs", "numEnvs": 1}
    with pytest.raises(SpecError, match=r"spec\.sampling\.observationFilter.*policy 'even'"):
        MultiAgentEnvRunner(job(env=env, sampling={"observationFilter": "meanStd"}))


@pytest.mark.parametrize("truncate", [False, True])
def test_an_episode_ended_by_all_ends_every_agents_last_row(truncate: bool) -> None:
    # RLlib-style envs end an episode with {"__all__": True} and no per-agent flag.
    env = {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_all_done", "numEnvs": 1,
           "config": {"truncate": truncate}}  # fmt: skip
    multi = {"policies": {"even": {}}, "policyMapping": {"rules": [{"regex": ".*", "policy": "even"}]}}
    batch = MultiAgentEnvRunner(job(env, multi)).sample(num_episodes=1)["even"]
    for agent in ("a", "b"):
        rows = batch.rows(batch["agent_id"] == agent)
        assert rows["t"].tolist() == [0, 1, 2]
        ended = rows["truncateds"] if truncate else rows["terminateds"]
        assert ended.tolist() == [False, False, True]
        assert not (rows["terminateds"] if truncate else rows["truncateds"]).any()


def test_tuple_observations_are_one_column_per_leaf_per_policy() -> None:
    env = {"entryPoint": "tests.unit.sampling.multiagent_test_envs:make_tuple_obs", "numEnvs": 2}
    runner = MultiAgentEnvRunner(job(env))
    batch = runner.sample()
    for part in batch.values():
        assert "obs" not in part and part["obs/0"].dtype == np.float32 and part["obs/0"].shape[1:] == (1,)
        assert part["obs/1"].dtype == np.int64 and part["obs/2"].dtype == np.int32
        # The env's rule, read from the leaves: position moves by action - 1, reward is the action.
        np.testing.assert_array_equal(part["new_obs/0"][:, 0], part["obs/0"][:, 0] + part["actions"] - 1)
        np.testing.assert_array_equal(part["rewards"], part["actions"].astype(np.float32))
        np.testing.assert_array_equal(part["new_obs/1"], part["obs/1"])  # the agent's own number
        np.testing.assert_array_equal(part["new_obs/2"], part["obs/2"] + 1)  # one env step later
        np.testing.assert_array_equal(part["obs/1"], part["agent_index"])
        for run in trajectories(part):
            np.testing.assert_array_equal(run["obs/0"][1:], run["new_obs/0"][:-1])
    whole = runner.sample(num_episodes=2)
    for part in whole.values():  # episodes end at step 8: last rows flagged, new_obs the same episode's
        assert (part["terminateds"] | part["truncateds"]).sum() >= 2
        np.testing.assert_array_equal(part["new_obs/1"], part["obs/1"])
        assert (part["new_obs/2"] <= 8).all()
    assert runner.policies["even"].model_space.shape == (1 + 8 + 1,)


@pytest.mark.parametrize("pettingzoo", [False, True])
def test_max_episode_steps_truncates_parallel_envs_too(pettingzoo: bool) -> None:
    """WalkEnv's own episodes last 8 env steps; a bound of 3 cuts each after 3, counted."""
    make = "make_pettingzoo_walk" if pettingzoo else "make_walk"
    env = {"entryPoint": f"tests.unit.sampling.multiagent_test_envs:{make}", "numEnvs": 2}
    with MultiAgentEnvRunner(job(env, {**EVEN_ODD, "maxEpisodeSteps": 3})) as runner:
        batch = runner.sample(num_episodes=4)
        metrics = runner.get_metrics()
    assert metrics["num_episodes_truncated_by_max_steps"] == 4 and metrics["episode_len_mean"] == 3
    for part in batch.values():
        for run in trajectories(part):
            assert run["t"].tolist() == [0, 1, 2]
            assert run["truncateds"].tolist() == [False, False, True] and not run["terminateds"].any()
            np.testing.assert_array_equal(run["new_obs"][:, 2], [1, 2, 3])  # the env's step count

"""EnvRunner against facts from outside our code: CartPole's published dynamics, episode
boundaries and time limits, seeds, and counting envs that tell us what they saw."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from rolloutfleet import Callbacks, EnvRunner, RolloutJob, SampleBatch, SpecError
from tests.unit.sampling.sampler_test_envs import ClipProbe, CounterEnv, CounterVectorEnv


def job(
    env: dict[str, Any], sampling: dict[str, Any] | None = None, policy: dict[str, Any] | None = None
) -> RolloutJob:
    spec: dict[str, Any] = {"env": env, "sampling": {"seed": 0, **(sampling or {})}}
    if policy:
        spec["policy"] = policy
    return RolloutJob.from_dict({"metadata": {"name": "test"}, "spec": spec})


def cartpole_step(state: np.ndarray, action: np.ndarray) -> np.ndarray:
    """CartPole's equations of motion (Barto, Sutton & Anderson 1983; gymnasium's constants, Euler)."""
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass, polemass_length = masscart + masspole, masspole * length
    x, x_dot, theta, theta_dot = (state[:, i].astype(np.float64) for i in range(4))
    force = np.where(action == 1, force_mag, -force_mag)
    temp = (force + polemass_length * theta_dot**2 * np.sin(theta)) / total_mass
    thetaacc = (gravity * np.sin(theta) - np.cos(theta) * temp) / (
        length * (4.0 / 3.0 - masspole * np.cos(theta) ** 2 / total_mass)
    )
    xacc = temp - polemass_length * thetaacc * np.cos(theta) / total_mass
    return np.stack([x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc], 1)


def out_of_bounds(obs: np.ndarray) -> np.ndarray:
    return (np.abs(obs[:, 0]) > 2.4) | (np.abs(obs[:, 2]) > 12 * 2 * math.pi / 360)


@pytest.mark.parametrize("vectorization", ["vector", "sync"])
def test_cartpole_transitions_follow_the_dynamics(vectorization: str) -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 4, "vectorization": vectorization}))
    batch = SampleBatch.concat([runner.sample(), runner.sample()])
    predicted = cartpole_step(batch["obs"], batch["actions"])
    np.testing.assert_allclose(batch["new_obs"], predicted, rtol=1e-4, atol=1e-4)
    ended = batch["terminateds"]
    assert ended.any()
    # Termination is exactly "the pole fell or the cart left the track" (the env's docs).
    np.testing.assert_array_equal(ended, out_of_bounds(batch["new_obs"]))
    # Episodes start from the documented reset distribution U(-0.05, 0.05).
    starts = batch["obs"][batch["t"] == 0]
    assert len(starts) > 0
    assert np.all(np.abs(starts) <= 0.05)


@pytest.mark.parametrize("vectorization", ["vector", "sync"])
def test_no_row_crosses_an_episode_boundary(vectorization: str) -> None:
    runner = EnvRunner(
        job({"id": "CartPole-v1", "numEnvs": 3, "vectorization": vectorization}, {"rolloutFragmentLength": 50})
    )
    batch = SampleBatch.concat([runner.sample() for _ in range(4)])
    for chunk in batch.split_by_episode():
        t = chunk["t"]
        np.testing.assert_array_equal(np.diff(t), 1)  # consecutive steps of one episode
        np.testing.assert_array_equal(chunk["new_obs"][:-1], chunk["obs"][1:])  # s' of one row is s of the next
        assert not (chunk["terminateds"][:-1] | chunk["truncateds"][:-1]).any()
        assert len(set(chunk["env_id"].tolist())) == 1


def test_truncation_at_the_time_limit() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 2, "config": {"max_episode_steps": 7}}))
    batch = runner.sample()
    truncated = batch["truncateds"] & ~batch["terminateds"]
    assert truncated.any()
    assert np.all(batch["t"][truncated] == 6)  # the 7th step of the episode
    assert batch["t"].max() <= 6
    # The truncated row's new_obs is the true last observation: still inside the bounds.
    assert not out_of_bounds(batch["new_obs"][truncated]).any()
    np.testing.assert_allclose(
        batch["new_obs"][truncated], cartpole_step(batch["obs"][truncated], batch["actions"][truncated]), atol=1e-4
    )


def test_truncate_episodes_shape_and_order() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 5}, {"rolloutFragmentLength": 33}))
    for _ in range(3):
        batch = runner.sample()
        assert len(batch) == 5 * 33
        env = batch["env_id"]
        assert (np.diff(env) >= 0).all() and set(env.tolist()) == set(range(5))  # env-major
        # Each env's rows are consecutive steps: within an episode, t rises by one.
        for chunk in batch.split_by_episode():
            np.testing.assert_array_equal(np.diff(chunk["t"]), 1)
        assert set(batch) == {
            "obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id", "env_id",
            "agent_index", "t", "action_logp", "action_dist_inputs", "vf_preds", "weights_seq_no",
        }  # fmt: skip


def test_counter_env_every_transition_is_what_the_env_saw() -> None:
    CounterEnv.instances.clear()
    # sync: auto would first time a throwaway instance, which would take instances[0]
    counter = {"entryPoint": "tests.unit.sampling.sampler_test_envs:make_counter", "config": {"length": 4}}
    runner = EnvRunner(job({**counter, "numEnvs": 2, "vectorization": "sync"}))
    batch = runner.sample(num_timesteps=20)
    obs, new_obs = batch["obs"], batch["new_obs"]
    np.testing.assert_array_equal(new_obs[:, 1], obs[:, 1] + 1)  # the step counter advanced by one
    np.testing.assert_array_equal(new_obs[:, 0], obs[:, 0])  # never the next episode's observation
    np.testing.assert_array_equal(batch["rewards"], new_obs[:, 1])
    np.testing.assert_array_equal(batch["terminateds"], new_obs[:, 1] == 4)
    np.testing.assert_array_equal(batch["t"], obs[:, 1])
    for env_index, env in enumerate(CounterEnv.instances):
        rows = batch["env_id"] == env_index
        assert env.seen_actions[: rows.sum()] == batch["actions"][rows].tolist()


def counter_facts(batch: SampleBatch, length: int | np.ndarray) -> None:
    """What every row of a counter env's batch must satisfy (obs = [episode, step]);
    ``length``: the episode length, or one per sub-env."""
    obs, new_obs = batch["obs"], batch["new_obs"]
    np.testing.assert_array_equal(new_obs[:, 0], obs[:, 0])  # never the next episode's observation
    np.testing.assert_array_equal(new_obs[:, 1], obs[:, 1] + 1)  # one step of the counter
    np.testing.assert_array_equal(batch["t"], obs[:, 1])
    lengths = length if np.isscalar(length) else np.asarray(length)[batch["env_id"]]
    np.testing.assert_array_equal(batch["terminateds"], new_obs[:, 1] == lengths)
    for chunk in batch.split_by_episode():
        assert len(set(chunk["obs"][:, 0].tolist())) == 1  # one eps_id is one episode of one env


@pytest.mark.parametrize("end_on_reset", [False, True])
def test_next_step_vector_env_episodes_span_sample_calls(end_on_reset: bool) -> None:
    length = 7  # episodes span several 3-step fragments, and their reset steps fall anywhere
    runner = EnvRunner(
        job({"id": "RolloutFleetCounterVec-v0", "numEnvs": 3, "config": {"length": length, "end_on_reset": end_on_reset}},
            {"rolloutFragmentLength": 3, "clipRewards": 2.5})
    )  # fmt: skip
    batches = [runner.sample() for _ in range(12)]
    for batch in batches:
        assert len(batch) == 9
        counter_facts(batch, length)
        np.testing.assert_array_equal(batch["rewards"], np.minimum(batch["new_obs"][:, 1], 2.5))
    every = SampleBatch.concat(batches)
    for env in range(3):  # each env's rows: episode after episode, step after step, nothing skipped
        rows = every.rows(every["env_id"] == env)
        np.testing.assert_array_equal(rows["obs"], np.stack([np.arange(36) // length, np.arange(36) % length], 1))
    metrics = runner.get_metrics()
    assert metrics["num_episodes"] >= 3 * (36 // length)
    assert metrics["episode_len_mean"] == length
    assert metrics["episode_return_mean"] == length * (length + 1) / 2  # the env's rewards, not the clipped ones
    assert metrics["num_env_steps_sampled"] >= len(every)


def test_no_env_falls_behind_the_others() -> None:
    # Sub-env i's episodes last 2 + 3i steps, so they lose a reset step at very different
    # rates. Each batch still holds the earliest rows: no row is more than a fragment old.
    runner = EnvRunner(
        job({"id": "RolloutFleetCounterVec-v0", "numEnvs": 4, "config": {"length": 2, "spread": 3}},
            {"rolloutFragmentLength": 5})
    )  # fmt: skip
    lengths = 2 + 3 * np.arange(4)
    for k in range(300):
        batch = runner.sample()
        assert len(batch) == 20
        counter_facts(batch, lengths)
        episode, step, env = batch["obs"][:, 0], batch["obs"][:, 1], batch["env_id"]
        vector_step = episode * (lengths[env] + 1) + step  # each episode: its steps, then one reset step
        assert vector_step.max() - vector_step.min() <= 5 + 1, k


def test_wide_vector_env_episodes_counted_as_the_env_ran_them() -> None:
    # 160 sub-envs: the episode bookkeeping adds row to row instead of numpy's cumsum
    # (episode_clock.cumsum_down); ids, t, returns and lengths must come out as the counters say.
    n = 160
    for spread in (1, 0):
        runner = EnvRunner(
            job({"id": "RolloutFleetCounterVec-v0", "numEnvs": n, "config": {"length": 3, "spread": spread}},
                {"rolloutFragmentLength": 40})
        )  # fmt: skip
        lengths = 3 + spread * np.arange(n)
        every = SampleBatch.concat([runner.sample() for _ in range(3)])
        counter_facts(every, lengths)
        for env in (0, 1, 37, n - 1):  # each env's rows: episode after episode, step after step
            rows = every.rows(every["env_id"] == env)
            k, length = len(rows), int(lengths[env])
            np.testing.assert_array_equal(rows["obs"], np.stack([np.arange(k) // length, np.arange(k) % length], 1))
        counters = runner.env.unwrapped
        metrics = runner.get_metrics()
        # Every end the counters reported (reset since, or pending reset) is one episode counted.
        assert metrics["num_episodes"] == int((counters.episode + counters.prev_done).sum())
        if spread == 0:  # every episode: 3 steps, rewards 1 + 2 + 3
            assert metrics["episode_len_mean"] == 3 and metrics["episode_return_mean"] == 6


def test_complete_episodes_and_num_episodes() -> None:
    runner = EnvRunner(
        job({"entryPoint": "tests.unit.sampling.sampler_test_envs:make_counter", "numEnvs": 3, "config": {"length": 6}},
            {"batchMode": "complete_episodes", "rolloutFragmentLength": 4})
    )  # fmt: skip
    batch = runner.sample()
    assert len(batch) >= 12
    for chunk in batch.split_by_episode():
        assert chunk["t"][0] == 0
        assert chunk["terminateds"][-1]
        assert len(chunk) == 6
    counter_facts(batch, 6)
    for _ in range(3):  # episodes that ended but were not taken wait for the next call
        batch = runner.sample(num_episodes=5)
        counter_facts(batch, 6)
        episodes = batch.split_by_episode()
        assert len(episodes) == 5
        assert all(len(e) == 6 and e["t"][0] == 0 for e in episodes)


def test_num_timesteps_rounds_up_to_whole_vector_steps() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 4}))
    assert len(runner.sample(num_timesteps=10)) == 12


def test_seeds_reproduce_and_differ_per_worker() -> None:
    spec = job({"id": "CartPole-v1", "numEnvs": 2}, {"rolloutFragmentLength": 20})
    a, b = EnvRunner(spec, worker_index=0).sample(), EnvRunner(spec, worker_index=0).sample()
    for name in ("obs", "actions", "rewards", "action_logp"):
        np.testing.assert_array_equal(a[name], b[name])
    c = EnvRunner(spec, worker_index=1).sample()
    assert not np.array_equal(a["obs"], c["obs"])
    # Sub-envs of one worker start differently too.
    assert not np.array_equal(a["obs"][a["env_id"] == 0][0], a["obs"][a["env_id"] == 1][0])


def test_explore_false_takes_the_most_likely_action_and_random_actions_skip_the_model() -> None:
    runner = EnvRunner(job({"id": "CartPole-v1", "numEnvs": 2}, {"rolloutFragmentLength": 10}))
    greedy = runner.sample(explore=False)
    np.testing.assert_array_equal(greedy["actions"], greedy["action_dist_inputs"].argmax(axis=1))
    randoms = runner.sample(random_actions=True)
    assert np.isnan(randoms["vf_preds"]).all()
    np.testing.assert_allclose(randoms["action_logp"], math.log(0.5))


def test_weights_round_trip_and_stale_seq_numbers_are_ignored() -> None:
    spec = job({"id": "CartPole-v1", "numEnvs": 2}, {"rolloutFragmentLength": 5})
    runner, other = EnvRunner(spec), EnvRunner(spec)
    assert runner.get_weights().keys() == {"default"}  # a single-agent job is one policy, "default"
    weights = {k: v + 0.5 for k, v in runner.get_weights()["default"].items()}
    assert other.set_weights("default", weights, seq_no=3)
    assert not other.set_weights("default", runner.get_weights()["default"], seq_no=3)  # not newer: ignored
    assert not other.set_weights("default", runner.get_weights()["default"], seq_no=2)
    assert other.weights_seq_nos == {"default": 3}
    for name, value in other.get_weights()["default"].items():
        np.testing.assert_array_equal(value, weights[name])
    batch = other.sample()
    assert (batch["weights_seq_no"] == 3).all()
    # Acting uses the loaded weights: a batch's logits are the new model's output.
    probe = EnvRunner(spec, worker_index=5)
    probe.set_weights("default", weights, seq_no=1)
    greedy = other.sample(explore=False)
    np.testing.assert_allclose(
        probe.policy.forward(greedy["obs"])[0], greedy["action_dist_inputs"], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match="missing"):
        other.set_weights("default", {"nope": np.zeros(1)}, seq_no=9)
    with pytest.raises(KeyError, match="no policy 'red'"):
        other.set_weights("red", weights, seq_no=9)


def test_state_round_trip_includes_filters() -> None:
    spec = job({"id": "Pendulum-v1", "numEnvs": 2}, {"observationFilter": "meanStd", "rolloutFragmentLength": 50})
    runner = EnvRunner(spec)
    runner.sample()
    state = runner.get_state()
    fresh = EnvRunner(spec, worker_index=3)
    fresh.set_state(state)
    assert fresh.filter is not None
    assert runner.filter is not None
    np.testing.assert_array_equal(fresh.filter.stats.mean, runner.filter.stats.mean)
    assert fresh.filter.stats.count == runner.filter.stats.count == 2 * 51
    assert fresh.get_state()["num_env_steps_sampled_lifetime"] == 100


def test_mean_std_filter_tracks_the_observations_the_env_produced() -> None:
    # With random actions, a filtered and an unfiltered runner with one seed see the same
    # observations: the unfiltered twin tells us what the raw data was.
    spec = {"id": "Pendulum-v1", "numEnvs": 4}
    filtered = EnvRunner(job(spec, {"observationFilter": "meanStd"}))
    raw = EnvRunner(job(spec))
    filtered_obs = np.concatenate([filtered.sample(random_actions=True)["obs"] for _ in range(5)])
    raw_batch = SampleBatch.concat([raw.sample(random_actions=True) for _ in range(5)])
    raw_obs = raw_batch["obs"]
    ends = raw_batch["terminateds"] | raw_batch["truncateds"]
    assert filtered.filter is not None
    stats = filtered.filter.stats
    # Every observation once: each row's obs, each episode's final one, the one after the last step.
    assert ends.sum() == 4 * 5  # Pendulum's time limit: 200 steps
    assert stats.count == len(raw_obs) + ends.sum() + 4
    everything = np.concatenate([raw_obs, raw_batch["new_obs"][ends]])
    np.testing.assert_allclose(stats.mean, everything.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(stats.mean, raw_obs.mean(axis=0), atol=0.02)
    np.testing.assert_allclose(stats.std, raw_obs.std(axis=0), rtol=0.02)
    # The policy saw (raw - running mean) / running std: the last steps of the last batch
    # (rows are env-major, 200 per env) were normalized with nearly the final statistics.
    late = np.r_[195:200, 395:400, 595:600, 795:800] + 3200
    # (the statistics moved a little after them: the episodes' 4 final observations came last)
    np.testing.assert_allclose(filtered_obs[late], (raw_obs[late] - stats.mean) / stats.std, atol=0.02)


def test_filters_sync_like_rllib() -> None:
    spec = job({"id": "Pendulum-v1", "numEnvs": 2}, {"observationFilter": "meanStd", "rolloutFragmentLength": 20})
    a, b = EnvRunner(spec, worker_index=0), EnvRunner(spec, worker_index=1)
    a.sample()
    b.sample()
    central = a.get_filters(flush_after=True)["default"]
    central.apply_changes(b.get_filters(flush_after=True)["default"])
    a.sync_filters({"default": central})
    b.sync_filters({"default": central})
    assert a.filter is not None
    assert b.filter is not None
    assert a.filter.stats.count == b.filter.stats.count == central.stats.count == 2 * 2 * 21
    np.testing.assert_allclose(a.filter.stats.mean, b.filter.stats.mean)


def test_clipping_rewards_and_actions() -> None:
    ClipProbe.received.clear()
    runner = EnvRunner(
        job({"entryPoint": "tests.unit.sampling.sampler_test_envs:make_clip_probe", "numEnvs": 2},
            {"clipRewards": 2.5, "clipActions": True, "rolloutFragmentLength": 200},
            {"hidden": [8]})
    )  # fmt: skip
    # A wide Gaussian: many sampled actions fall outside [-1, 1].
    weights = runner.get_weights()["default"]
    weights["log_std"] = np.full_like(weights["log_std"], 1.0)
    runner.set_weights("default", weights)
    batch = runner.sample()
    assert (batch["rewards"] == 2.5).all()
    assert runner.get_metrics()["num_env_steps_sampled"] == 400
    received = np.concatenate(ClipProbe.received)
    assert np.abs(batch["actions"]).max() > 1  # the batch keeps the sampled action ...
    assert np.abs(received).max() <= 1  # ... the env only ever saw clipped ones


def test_a_failing_sub_env_is_recreated_and_only_its_episode_dropped() -> None:
    CounterEnv.failures_left = 1
    runner = EnvRunner(
        job(
            {"entryPoint": "tests.unit.sampling.sampler_test_envs:make_flaky", "numEnvs": 3, "vectorization": "sync"},
            {"rolloutFragmentLength": 12},
        )
    )
    batch = runner.sample()
    metrics = runner.get_metrics()
    assert metrics["num_env_restarts"] == 1
    assert metrics["num_episodes_dropped"] == 1
    assert len(batch) == 3 * 12
    # Sub-env 1 ran episode 0 (5 steps), crashed on step 2 of episode 1 (its 2 rows and
    # the crash are not transitions), and the recreated env started over: 5 steps. The
    # batch takes the earliest 36 rows, so the others contribute 13 steps each, losing nothing.
    for healthy in (0, 2):
        rows = batch.rows(batch["env_id"] == healthy)
        assert [c["t"].tolist() for c in rows.split_by_episode()] == [list(range(5)), list(range(5)), [0, 1, 2]]
    failed_rows = batch.rows(batch["env_id"] == 1)
    chunks = failed_rows.split_by_episode()
    assert [c["t"].tolist() for c in chunks] == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert len({int(c["eps_id"][0]) for c in chunks}) == 2
    for chunk in chunks:
        np.testing.assert_array_equal(chunk["new_obs"][:, 1], chunk["obs"][:, 1] + 1)


def test_a_failing_vector_env_is_rebuilt_and_only_episodes_with_transitions_count_as_dropped() -> None:
    # Sub-env i: episodes of 2 + i steps, then a reset step. The 4th vector step raises:
    # by then sub-env 0 had just reset (no transition yet), sub-env 1 had just ended its
    # episode, and only sub-env 2 loses one (3 transitions).
    CounterVectorEnv.failures_left = 1
    runner = EnvRunner(
        job({"id": "RolloutFleetCounterVec-v0", "numEnvs": 3, "config": {"length": 2, "spread": 1, "fail_at": 4}},
            {"rolloutFragmentLength": 8})
    )  # fmt: skip
    batch = runner.sample()
    metrics = runner.get_metrics()
    assert metrics["num_env_restarts"] == 1 and metrics["num_episodes_dropped"] == 1
    lengths = 2 + np.arange(3)
    counter_facts(batch, lengths)
    # The earliest 24 rows: up to the crash (vector steps 0-2), then the rebuilt envs.
    chunks = {env: [c["t"].tolist() for c in batch.rows(batch["env_id"] == env).split_by_episode()] for env in range(3)}
    assert chunks == {
        0: [[0, 1]] * 4,  # before the crash, then three more
        1: [[0, 1, 2]] * 3,
        2: [[0, 1, 2, 3], [0, 1, 2]],  # its episode cut by the crash is gone
    }


class Recorder(Callbacks):
    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[tuple[int, int]] = []
        self.steps = 0
        self.samples = 0

    def on_episode_start(self, *, runner: Any, env_index: int, eps_id: int) -> None:
        self.starts.append(eps_id)

    def on_episode_step(self, **kwargs: Any) -> None:
        self.steps += 1

    def on_episode_end(self, *, eps_id: int, episode_length: int, **kwargs: Any) -> None:
        self.ends.append((eps_id, episode_length))

    def on_sample_end(self, *, runner: Any, batch: SampleBatch) -> None:
        self.samples += 1


def test_callbacks_see_every_episode() -> None:
    recorder = Recorder()
    runner = EnvRunner(
        job(
            {"entryPoint": "tests.unit.sampling.sampler_test_envs:make_counter", "numEnvs": 2, "config": {"length": 3}},
            {"rolloutFragmentLength": 9},
        ),
        callbacks=recorder,
    )
    batch = runner.sample()
    assert recorder.samples == 1
    assert recorder.steps == len(batch) == 18
    assert {length for _, length in recorder.ends} == {3}
    assert {eps for eps, _ in recorder.ends} <= set(recorder.starts)
    assert len(recorder.ends) == int(batch["terminateds"].sum()) == 6
    assert len(recorder.starts) == 2 + 6  # the first two, then one after each end
    metrics = runner.get_metrics()
    assert metrics["num_episodes"] == 6
    assert metrics["episode_len_mean"] == 3
    assert metrics["episode_return_mean"] == 6


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"entryPoint": "no_such_module_xyz:make"}, "spec.env.entryPoint"),
        ({"entryPoint": "tests.unit.sampling.sampler_test_envs:missing"}, "spec.env.entryPoint"),
        ({"entryPoint": "tests.unit.sampling.sampler_test_envs:not_an_env"}, "spec.env.entryPoint"),
        ({"id": "NoSuchEnv-v0"}, "spec.env.id"),
    ],
)
def test_bad_envs_name_the_field(env: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        EnvRunner(job(env))


def test_bad_policy_entry_point_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"spec\.policy\.entryPoint"):
        EnvRunner(job({"id": "CartPole-v1"}, policy={"entryPoint": "tests.unit.sampling.sampler_test_envs:not_an_env"}))


def test_custom_policy_module(tmp_path: Any) -> None:
    runner = EnvRunner(
        job(
            {"id": "CartPole-v1", "numEnvs": 2},
            {"rolloutFragmentLength": 5},
            {"entryPoint": "tests.unit.sampling.sampler_test_policies:AlwaysRight"},
        )
    )
    batch = runner.sample()
    assert (batch["actions"] == 1).all()
    np.testing.assert_allclose(batch["vf_preds"], 7.0)


def test_async_vectorization_samples_the_same_dynamics() -> None:
    runner = EnvRunner(
        job({"id": "CartPole-v1", "numEnvs": 2, "vectorization": "async"}, {"rolloutFragmentLength": 30})
    )
    try:
        batch = runner.sample()
    finally:
        runner.close()
    np.testing.assert_allclose(batch["new_obs"], cartpole_step(batch["obs"], batch["actions"]), rtol=1e-4, atol=1e-4)
    assert len(batch) == 60


def test_image_observations_use_the_cnn() -> None:
    runner = EnvRunner(
        job(
            {"entryPoint": "tests.unit.sampling.sampler_test_policies:make_image_env", "numEnvs": 2},
            {"rolloutFragmentLength": 3},
        )
    )
    batch = runner.sample()
    assert batch["obs"].shape == (6, 40, 40, 3)
    assert batch["obs"].dtype == np.uint8
    assert np.isfinite(batch["vf_preds"]).all()

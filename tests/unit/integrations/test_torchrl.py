"""A job's rows as TorchRL's TensorDicts, judged on real CartPole fragments against the env's
own dynamics and TorchRL's own components: the keys TorchRL's GAE and ClipPPOLoss read, the
next observation of a step being the observation of the step after it, done flags at the
env's episode ends and at every fragment cut, and the same network on both sides (the
actor's log-probabilities are the workers' own)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.integrations.torchrl import fleet_policy, network_of, runs, to_tensordict

X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole-v1 terminates past these


@pytest.fixture(scope="module")
def job() -> RolloutJob:
    return RolloutJob.from_file("examples/cartpole.yaml")


@pytest.fixture(scope="module")
def fragments(job: RolloutJob) -> list[dict[str, np.ndarray]]:
    runner = EnvRunner(job)
    return [dict(runner.sample()) for _ in range(2)]


def test_the_keys_torchrl_reads_with_their_shapes_and_dtypes(fragments: list[dict[str, np.ndarray]]) -> None:
    batch = fragments[0]
    data = to_tensordict(batch)
    rows = len(batch["obs"])
    assert tuple(data.batch_size) == (rows,)
    assert data["observation"].shape == (rows, 4) and data["next", "observation"].shape == (rows, 4)
    assert data["action"].dtype == torch.int64 and data["action_log_prob"].shape == (rows,)
    for key in (("next", "reward"), ("next", "done"), ("next", "terminated"), ("next", "truncated"), "done"):
        assert data[key].shape == (rows, 1), key
    assert not data["done"].any() and not data["terminated"].any()  # root flags: as after a reset
    np.testing.assert_array_equal(data["collector", "traj_ids"].numpy(), batch["eps_id"])
    np.testing.assert_array_equal(data["next", "reward"].numpy()[:, 0], batch["rewards"])


def test_next_observation_is_the_next_steps_observation_and_done_flags_sit_at_ends_and_cuts(
    fragments: list[dict[str, np.ndarray]],
) -> None:
    batch = fragments[0]
    data = to_tensordict(batch)
    obs, new_obs = data["observation"].numpy(), data["next", "observation"].numpy()
    done, terminated = data["next", "done"].numpy()[:, 0], data["next", "terminated"].numpy()[:, 0]
    same_run = (batch["env_id"][1:] == batch["env_id"][:-1]) & (batch["eps_id"][1:] == batch["eps_id"][:-1])
    assert same_run.sum() > 1000
    np.testing.assert_array_equal(new_obs[:-1][same_run], obs[1:][same_run])
    assert not done[:-1][same_run].any()  # within an episode and a run: never done
    # Terminated where CartPole's own dynamics end the episode, and only there.
    out_of_bounds = (np.abs(new_obs[:, 0]) > X_LIMIT) | (np.abs(new_obs[:, 2]) > THETA_LIMIT)
    np.testing.assert_array_equal(terminated, out_of_bounds)
    # Done at every episode end and at the last row of each sub-environment (the fragment cut).
    ends = batch["terminateds"] | batch["truncateds"]
    last_of_env = np.append(batch["env_id"][1:] != batch["env_id"][:-1], True)
    np.testing.assert_array_equal(done, ends | last_of_env)
    truncated = data["next", "truncated"].numpy()[:, 0]
    np.testing.assert_array_equal(truncated, (batch["truncateds"] | last_of_env) & ~terminated)


def test_runs_split_at_message_starts_where_two_workers_share_sub_environment_ids(
    fragments: list[dict[str, np.ndarray]],
) -> None:
    one = {k: v[-5:] for k, v in fragments[0].items()}  # the last sub-environment's last rows
    two = {k: v[:5] for k, v in fragments[1].items()}
    two["env_id"] = np.full(5, one["env_id"][-1])  # another worker's, under the same id
    joined = {k: np.concatenate([one[k], two[k]]) for k in one}
    assert runs(joined, starts=[0, 5]) == [slice(0, 5), slice(5, 10)]
    done = to_tensordict(joined, starts=[0, 5])["next", "done"].numpy()[:, 0]
    assert done[4] and done[9]  # each message's run ends done: GAE never runs from one into the other


def test_the_actor_is_the_workers_network_its_log_probs_are_theirs_and_ppo_steps(
    job: RolloutJob, fragments: list[dict[str, np.ndarray]]
) -> None:
    policy = fleet_policy(job)  # the weights every worker starts from, as the fragments were sampled
    data = to_tensordict(fragments[0])
    with torch.no_grad():
        GAE(gamma=0.99, lmbda=0.95, value_network=policy.critic)(data)
    assert data["advantage"].shape == (len(data), 1) and torch.isfinite(data["value_target"]).all()
    losses = ClipPPOLoss(policy.actor, policy.critic)(data)
    # The importance ratio of the workers' actions under the learner's actor: exactly 1.
    assert float(losses["max_ratio"]) == pytest.approx(1.0, abs=1e-5)
    assert float(losses["kl_approx"]) == pytest.approx(0.0, abs=1e-6)
    assert network_of(policy.actor, job) is policy.network


def test_a_module_that_is_not_the_workers_network_is_refused_naming_what_it_needs(job: RolloutJob) -> None:
    with pytest.raises(ValueError, match=r"no part of Sequential is the workers' network for cartpole: it needs .*\[64, 4\]"):  # fmt: skip
        network_of(nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2)), job)


def test_rows_without_sub_environment_ids_are_cut_by_episode_alone(fragments: list[dict[str, np.ndarray]]) -> None:
    """A replayed Minari dataset's rows carry no env_id: each episode is a run, cut where t restarts."""
    batch = {k: v for k, v in fragments[0].items() if k != "env_id"}
    one_env = fragments[0]["env_id"] == fragments[0]["env_id"][0]
    batch = {k: v[one_env] for k, v in batch.items()}
    data = to_tensordict(batch)
    done = data["next", "done"].numpy()[:, 0]
    np.testing.assert_array_equal(done[:-1], (batch["terminateds"] | batch["truncateds"])[:-1])
    assert done[-1]  # the cut at the end of the batch

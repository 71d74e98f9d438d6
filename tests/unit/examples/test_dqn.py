"""The DQN example's pieces (no Redis, no training run): n-step transitions and TD targets
agree with the Bellman formula worked by hand, the replay ring keeps the newest rows, and
the Q-network it publishes acts in a worker as the argmax of the learner's Q-values."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.data.codec import decode_tensors, encode_tensors
from rolloutfleet.examples.dqn import (
    DQN,
    DQNConfig,
    ReplayBuffer,
    _refusal,
    greedy_returns,
    nstep_transitions,
    q_values,
)
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.transport.weights import to_numpy_state

MANIFEST = Path(__file__).resolve().parents[3] / "examples" / "dqn.yaml"


class TableQ(torch.nn.Module):
    """Q(s, ·) = the row of ``table`` named by the observation's first entry."""

    def __init__(self, table: list[list[float]]) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.table[obs[:, 0].long()], torch.zeros(len(obs))


def _batch(
    rewards: list[float], eps: list[int], t: list[int], terminated: list[bool], truncated: list[bool]
) -> dict[str, np.ndarray]:
    rows = len(rewards)
    return {
        "obs": np.arange(rows, dtype=np.float32)[:, None],
        "new_obs": np.arange(1, rows + 1, dtype=np.float32)[:, None] + 100,
        "actions": np.zeros(rows, np.int64),
        "rewards": np.array(rewards, np.float32),
        "eps_id": np.array(eps),
        "t": np.array(t),
        "terminateds": np.array(terminated),
        "truncateds": np.array(truncated),
    }


def test_one_step_transitions_bootstrap_unless_terminated() -> None:
    batch = _batch([1, 2, 3, 4], [7, 7, 8, 8], [0, 1, 5, 6], [False, True, False, False], [False, False, False, True])
    out = nstep_transitions(batch, gamma=0.5, n=1)
    np.testing.assert_array_equal(out["returns"], [1, 2, 3, 4])
    np.testing.assert_array_equal(out["discounts"], [0.5, 0.0, 0.5, 0.5])  # truncation bootstraps
    np.testing.assert_array_equal(out["next_obs"], batch["new_obs"])


def test_n_step_returns_stop_at_episode_ends_and_fragment_cuts() -> None:
    # Episode 7: rows 0-3, terminated at row 3. Episode 9: rows 4-5, cut by the fragment (t
    # jumps from 3 to 9 between rows 5 and 6, so row 6 starts another chunk of it).
    batch = _batch(
        [1, 2, 4, 8, 1, 3, 5],
        [7, 7, 7, 7, 9, 9, 9],
        [0, 1, 2, 3, 2, 3, 9],
        [False, False, False, True, False, False, False],
        [False] * 7,
    )
    g = 0.5
    out = nstep_transitions(batch, gamma=g, n=3)
    np.testing.assert_allclose(
        out["returns"], [1 + g * 2 + g * g * 4, 2 + g * 4 + g * g * 8, 4 + g * 8, 8, 1 + g * 3, 3, 5]
    )
    np.testing.assert_allclose(out["discounts"], [g**3, 0.0, 0.0, 0.0, g**2, g, g])
    np.testing.assert_array_equal(out["next_obs"][:, 0], batch["new_obs"][[2, 3, 3, 3, 5, 5, 6], 0])


@pytest.mark.parametrize("double", [True, False])
def test_td_target_is_the_bellman_backup(double: bool) -> None:
    online = TableQ([[0.0, 0.0], [1.0, 5.0], [3.0, 2.0]])
    dqn = DQN(online, DQNConfig(double=double))
    dqn.target.table.data = torch.tensor([[0.0, 0.0], [10.0, 20.0], [40.0, 30.0]])
    returns = torch.tensor([1.0, 2.0, 3.0])
    next_obs = torch.tensor([[1.0], [2.0], [2.0]])
    discounts = torch.tensor([0.9, 0.81, 0.0])
    targets = dqn.td_targets(returns, next_obs, discounts)
    # r + discount · Q_target(s', a*): both networks prefer action 1 in state 1 and action 0
    # in state 2; the last row terminated (discount 0) and is its return alone.
    np.testing.assert_allclose(targets.numpy(), [1 + 0.9 * 20.0, 2 + 0.81 * 40.0, 3.0], rtol=1e-6)
    dqn.target.table.data = torch.tensor([[0.0, 0.0], [30.0, 20.0], [40.0, 30.0]])
    first = dqn.td_targets(returns, next_obs, discounts)[0].item()
    # Where the networks disagree (state 1: online prefers action 1, target action 0):
    assert first == pytest.approx(1 + 0.9 * (20.0 if double else 30.0))


def test_update_moves_q_towards_the_target_and_copies_the_target_on_schedule() -> None:
    online = TableQ([[0.0, 0.0], [0.0, 0.0]])
    dqn = DQN(online, DQNConfig(lr=0.1, target_update_every=3))
    target = dqn.target
    assert isinstance(target, TableQ)
    sample = {
        "obs": torch.tensor([[0.0]]),
        "actions": torch.tensor([1]),
        "returns": torch.tensor([1.0]),
        "next_obs": torch.tensor([[1.0]]),
        "discounts": torch.tensor([0.0]),
    }
    dqn.update(sample)
    assert online.table[0, 1].item() > 0 and online.table[0, 0].item() == 0
    assert target.table[0, 1].item() == 0  # not copied yet
    dqn.update(sample)
    dqn.update(sample)
    torch.testing.assert_close(target.table, online.table)


def test_train_takes_train_ratio_gradient_steps_per_env_step_after_learning_starts() -> None:
    dqn = DQN(TableQ([[0.0, 0.0], [0.0, 0.0]]), DQNConfig(learning_starts=4, train_ratio=0.25, batch_size=2))
    replay = ReplayBuffer(capacity=10)
    transitions: dict[str, np.ndarray] = {
        "obs": np.zeros((3, 1), np.float32),
        "actions": np.zeros(3, np.int64),
        "returns": np.ones(3, np.float32),
        "next_obs": np.ones((3, 1), np.float32),
        "discounts": np.zeros(3, np.float32),
    }
    replay.add(transitions)
    assert dqn.train(replay, 3) == 0  # 3 < learning_starts
    replay.add(transitions)
    assert [dqn.train(replay, steps) for steps in (3, 3, 2)] == [0, 1, 1]  # 0.75, 1.5, 1.0 owed
    assert dqn.updates == 2


def test_replay_ring_keeps_the_newest_rows() -> None:
    replay = ReplayBuffer(capacity=5)
    for start in (0, 3, 6):
        replay.add({"returns": np.arange(start, start + 3, dtype=np.float32)})
    assert len(replay) == 5
    assert sorted(replay.columns["returns"].tolist()) == [4, 5, 6, 7, 8]
    replay.add({"returns": np.arange(100, 107, dtype=np.float32)})  # more than the capacity at once
    assert sorted(replay.columns["returns"].tolist()) == [102, 103, 104, 105, 106]
    assert set(replay.sample(64)["returns"].tolist()) <= {102.0, 103.0, 104.0, 105.0, 106.0}


def test_published_q_network_acts_in_a_worker_as_the_argmax_of_the_learners_q_values() -> None:
    job = RolloutJob.from_file(MANIFEST)
    assert job.spec.policy.exploration.type == "epsilonGreedy"
    model = build_model(job)
    # A Q-network unlike the initial one, whose preference flips with the pole: fitted to
    # Q(s) = (-(θ + θ'), θ + θ'), the push that rights a CartPole's pole.
    torch.manual_seed(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(200):
        obs = torch.randn(256, 4) * 0.2
        lean = obs[:, 2] + obs[:, 3]
        loss = (q_values(model, obs) - torch.stack([-lean, lean], dim=1)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    # What WeightPublisher puts into Redis, as a worker decodes it.
    weights = decode_tensors(encode_tensors(to_numpy_state(model)))
    greedy = job.model_copy(
        update={"spec": job.spec.model_copy(update={"policy": job.spec.policy.model_copy(update={"explore": False})})}
    )
    runner = EnvRunner(greedy, worker_index=3, num_workers=4)
    assert runner.policy.inference == "numpy"  # the workers' torch-free forward pass
    runner.set_weights("default", weights, seq_no=1)
    batch = runner.sample()
    with torch.no_grad():
        learner_q = q_values(model, torch.as_tensor(batch["obs"])).numpy()
    np.testing.assert_array_equal(batch["actions"], learner_q.argmax(axis=1))
    np.testing.assert_allclose(batch["action_dist_inputs"], learner_q, rtol=1e-4, atol=1e-4)
    assert len(set(batch["actions"].tolist())) == 2  # both actions were chosen: the check has teeth


def test_greedy_evaluation_plays_whole_episodes() -> None:
    class AlwaysLeft(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.tensor([[1.0, 0.0]]).expand(len(obs), 2), torch.zeros(len(obs))

    envs = [gym.make("CartPole-v1") for _ in range(3)]
    returns = greedy_returns(AlwaysLeft(), envs, seed=0)
    # Pushing left every step topples the pole in ~8-10 steps; replay each episode by hand.
    for i, env in enumerate(envs):
        env.reset(seed=i)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(0)
            steps, done = steps + 1, terminated or truncated
        assert returns[i] == steps


def test_refuses_jobs_dqn_cannot_learn_in_one_line() -> None:
    job = RolloutJob.from_file(MANIFEST)
    assert _refusal(job, gym.spaces.Discrete(2)) is None
    assert "Discrete" in str(_refusal(job, gym.spaces.Box(-1, 1, (1,))))
    stochastic = RolloutJob.from_dict(
        {
            "metadata": {"name": "x"},
            "spec": {"env": {"id": "CartPole-v1"}, "policy": {"exploration": {"type": "stochastic"}}},
        }
    )
    assert str(_refusal(stochastic, gym.spaces.Discrete(2))).startswith("spec.policy.exploration.type")

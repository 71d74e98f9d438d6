"""The recurrent PPO example: its sequences cover every row once without crossing an
episode, and each is replayed from its first row's recorded state_in."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.examples.ppo import PPO, make_ppo
from rolloutfleet.examples.ppo_recurrent import RecurrentPPO, sequences
from rolloutfleet.fleet.runner_factory import build_model


def masked_job() -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "lstm"},
            "spec": {
                "env": {"entryPoint": "rolloutfleet.examples.masked_cartpole:make_env", "numEnvs": 4},
                "policy": {"hidden": [16], "device": "cpu", "recurrent": {"cell": "lstm", "size": 8}},
                "sampling": {"seed": 0, "rolloutFragmentLength": 40},
            },
        }
    )


def test_sequences_cover_each_row_once_within_one_episode() -> None:
    with EnvRunner(masked_job()) as runner:
        runner.sample()
        batch = runner.sample()  # starts mid-episode for most sub-envs
    assert batch["obs"].shape[1] == 2  # velocities hidden
    index = sequences(batch, 7)
    rows = index[index >= 0]
    assert sorted(rows.tolist()) == list(range(len(batch)))
    assert index.shape[1] == 7 and (index[:, 0] >= 0).all()
    for seq in index:
        seq = seq[seq >= 0]
        assert len(np.unique(batch["eps_id"][seq])) == 1
        np.testing.assert_array_equal(np.diff(batch["t"][seq]), 1)
        assert np.array_equal(seq, np.arange(seq[0], seq[0] + len(seq)))
    # Some sequences start mid-episode: their replay starts from a recorded, non-zero state.
    assert (batch["t"][index[:, 0]] > 0).any()


def test_the_learner_replays_sequences_from_their_recorded_state() -> None:
    torch.manual_seed(0)
    job = masked_job()
    model = build_model(job)
    ppo = make_ppo(model, gym.spaces.Discrete(2), max_seq_len=10)
    assert isinstance(ppo, RecurrentPPO)
    with EnvRunner(job) as runner:
        runner.sample()
        batch = runner.sample()
    # Replaying from the recorded state_in gives the logits the worker acted with (before any update).
    index = sequences(batch, 10)
    safe = np.where(index >= 0, index, index[:, :1])
    start = [torch.as_tensor(batch[name][index[:, 0]]) for name in ("state_in_0", "state_in_1")]
    with torch.no_grad():
        out, _, _ = model.unroll(torch.as_tensor(batch["obs"][safe]), start)
    real = index >= 0
    np.testing.assert_allclose(out.numpy()[real], batch["action_dist_inputs"][index[real]], atol=1e-5)
    # ...and from zeros instead it would not: the recorded state carries information.
    with torch.no_grad():
        wrong, _, _ = model.unroll(torch.as_tensor(batch["obs"][safe]), [torch.zeros_like(s) for s in start])
    assert not np.allclose(wrong.numpy()[real], batch["action_dist_inputs"][index[real]], atol=1e-5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = ppo.update(SampleBatch(batch))
    assert np.isfinite(stats["policy_loss"]) and stats["sequences"] == len(index)
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_feed_forward_model_gets_the_plain_ppo() -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1"}}})
    ppo = make_ppo(build_model(job), gym.spaces.Discrete(2))
    assert type(ppo) is PPO

"""PPO for stateful policies (``policy.recurrent``): truncated BPTT from the recorded state.

Rows are cut into sequences of at most ``max_seq_len`` consecutive steps of one episode
(one agent); each sequence is replayed through the model from the ``state_in`` its first
row recorded, so no sequence has to start at its episode's beginning and none crosses an
episode's end. Gradients flow through the sequence (not into its start state). Values for
bootstrapping a chunk cut without termination are taken with the state after its last row:
the model steps once on the row's ``obs`` from its ``state_in``, then reads ``new_obs``.

    rolloutfleet run examples/cartpole_lstm.yaml -- python -m rolloutfleet.examples.ppo examples/cartpole_lstm.yaml

(:func:`rolloutfleet.examples.ppo.make_ppo` picks this class for a stateful model.)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet import state_columns
from rolloutfleet.examples.ppo_algorithm import PPO, PPOConfig


def sequences(batch: Mapping[str, np.ndarray], max_len: int) -> np.ndarray:
    """``(sequences, max_len)`` row indices (-1: padding): runs of consecutive steps of one
    episode (and agent), in row order, cut every ``max_len`` rows.

    >>> sequences({"eps_id": np.array([1, 1, 1, 2, 2]), "t": np.array([4, 5, 6, 0, 1])}, 2)
    array([[ 0,  1],
           [ 2, -1],
           [ 3,  4]])
    """
    eps, t = batch["eps_id"], batch["t"]
    n = len(eps)
    if n == 0:
        return np.zeros((0, max_len), np.int64)
    same = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1)
    if "agent_index" in batch:
        same &= batch["agent_index"][1:] == batch["agent_index"][:-1]
    chunk_start = np.r_[True, ~same]
    starts = np.flatnonzero(chunk_start)
    position = np.arange(n) - starts[np.cumsum(chunk_start) - 1]
    seq_start = chunk_start | (position % max_len == 0)
    seq_id = np.cumsum(seq_start) - 1
    first = np.flatnonzero(seq_start)
    index = np.full((len(first), max_len), -1, np.int64)
    index[seq_id, np.arange(n) - first[seq_id]] = np.arange(n)
    return index


RECURRENT_CONFIG = PPOConfig(lr=3e-3, vf_coef=0.02, epochs=4)
"""The defaults for a recurrent model: its heads share the cell, and with the plain example's
``vf_coef`` (0.5) the value loss of CartPole's large returns outweighs the policy's under the
gradient-norm clip (the masked CartPole then does not learn in 240 K steps); a small
``vf_coef`` with a larger step lets it learn (``make demo-lstm``)."""


class RecurrentPPO(PPO):
    """:class:`PPO` whose minibatches are whole sequences replayed from their ``state_in``.

    The model is stateful with an ``unroll(obs[B, T], state) -> (out[B, T], values[B, T],
    state)`` method (:class:`~rolloutfleet.inference.recurrent_model.RecurrentModel`)."""

    def __init__(
        self,
        model: nn.Module,
        action_space: spaces.Space,  # type: ignore[type-arg]
        config: PPOConfig | None = None,
        max_seq_len: int = 20,
    ) -> None:
        super().__init__(model, action_space, config or RECURRENT_CONFIG)
        self.max_seq_len = max_seq_len

    def _bootstrap_values(self, batch: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
        state = [torch.as_tensor(batch[name][rows]) for name in state_columns(batch)]
        with torch.no_grad():
            _, _, after = self.model(torch.as_tensor(batch["obs"][rows]), state)
            _, tail, _ = self.model(torch.as_tensor(batch["new_obs"][rows]), after)
        return tail.double().numpy()

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        cfg = self.config
        names = state_columns(batch)
        if not names:
            raise ValueError("the batch has no state_in columns: was it sampled with a stateful policy?")
        advantages, returns = self.advantages(batch)
        index = sequences(batch, self.max_seq_len)
        mask = torch.as_tensor(index >= 0)
        safe = np.where(index >= 0, index, index[:, :1])  # padding repeats a real row (masked out)
        obs = torch.as_tensor(batch["obs"][safe])
        actions = torch.as_tensor(batch["actions"][safe])
        old_logp = torch.as_tensor(batch["action_logp"][safe])
        adv, ret = torch.as_tensor(advantages[safe]), torch.as_tensor(returns[safe])
        start = [torch.as_tensor(batch[name][index[:, 0]]) for name in names]
        per_minibatch = max(1, cfg.minibatch_size // self.max_seq_len)
        losses = []
        for _ in range(cfg.epochs):
            for chosen in torch.randperm(len(index)).split(per_minibatch):  # type: ignore[no-untyped-call]
                out, values, _ = self.model.unroll(  # type: ignore[operator]
                    obs[chosen], [part[chosen] for part in start]
                )
                m = mask[chosen]
                if int(m.sum()) < 2:  # advantages are normalized per minibatch: one row has no spread
                    continue
                losses.append(
                    self.step(
                        out[m], values[m], actions[chosen][m], old_logp[chosen][m], adv[chosen][m], ret[chosen][m]
                    )
                )
        policy_loss, value_loss = np.mean(losses, axis=0)
        return {"policy_loss": float(policy_loss), "value_loss": float(value_loss), "sequences": float(len(index))}

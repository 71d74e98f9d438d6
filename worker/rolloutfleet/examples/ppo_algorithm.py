"""PPO, the algorithm: clipped surrogate with GAE over rows of experience from any workers.

It knows nothing about Redis or jobs: ``PPO.update(batch)`` takes any SampleBatch. The
learner script around it is :mod:`rolloutfleet.examples.ppo`; its stateful-model form is
:mod:`rolloutfleet.examples.ppo_recurrent`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

ModelInput = Callable[[Mapping[str, np.ndarray], str], np.ndarray]
MASK_COLUMN = "action_mask"
"""The batch column of legal actions (jobs whose observations carry an ``action_mask``)."""


def _column(batch: Mapping[str, np.ndarray], column: str) -> np.ndarray:
    return batch[column]


@dataclass(frozen=True)
class PPOConfig:
    gamma: float = 0.99
    """Discount."""
    lam: float = 0.95
    """GAE lambda."""
    clip: float = 0.2
    """PPO ratio clip."""
    epochs: int = 6
    minibatch_size: int = 512
    lr: float = 1e-3
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    max_grad_norm: float = 0.5


class PPO:
    """Clipped-surrogate PPO on rows of experience from any number of workers.

    Episode chunks are found from the rows themselves (consecutive rows of one ``eps_id``
    with consecutive ``t``), so batches from several workers, in any order, are fine.
    A chunk that ends without termination — truncated by the time limit or cut at a
    fragment boundary — is bootstrapped with the value of its ``new_obs``.
    """

    def __init__(
        self,
        model: nn.Module,
        action_space: spaces.Space,  # type: ignore[type-arg]
        config: PPOConfig | None = None,
        inputs: ModelInput | None = None,
    ) -> None:
        self.model = model
        self.config = config or PPOConfig()
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.config.lr, eps=1e-5)
        self.inputs: ModelInput = inputs or _column
        """``(batch, "obs" | "new_obs") -> model input``: the column itself, or for Dict/Tuple
        observations ``ObsParts.batch_input`` (which reads the ``obs/<path>`` leaf columns)."""

    def _dist(self, obs: torch.Tensor) -> tuple[torch.distributions.Distribution, torch.Tensor]:
        out, values = self.model(obs)
        return self._distribution(out), values

    def _distribution(self, out: torch.Tensor, mask: torch.Tensor | None = None) -> torch.distributions.Distribution:
        """The action distribution of the model's outputs; with a ``mask`` (a batch's
        ``action_mask`` rows) masked actions get no probability, as when the workers sampled."""
        if self.discrete:
            if mask is not None:
                out = out.masked_fill(~mask, torch.finfo(out.dtype).min)
            return torch.distributions.Categorical(logits=out)
        mean, log_std = out.chunk(2, dim=-1)
        return torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1)

    def _bootstrap_values(self, batch: Mapping[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
        """V(new_obs) of the rows (a boolean mask) whose chunk is cut without termination."""
        with torch.no_grad():
            _, tail = self.model(torch.as_tensor(self.inputs(batch, "new_obs")[rows]))
        return tail.double().numpy()

    def advantages(self, batch: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """GAE(lambda) advantages and value targets for every row."""
        cfg = self.config
        rewards = batch["rewards"].astype(np.float64)
        values = batch["vf_preds"].astype(np.float64)
        terminated = batch["terminateds"]
        ended = terminated | batch["truncateds"]
        eps, t = batch["eps_id"], batch["t"]
        continues = np.zeros(len(rewards), np.bool_)
        continues[:-1] = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1) & ~ended[:-1]
        next_values = np.zeros_like(values)
        next_values[:-1] = values[1:]
        bootstrap = ~continues & ~terminated  # truncated, or cut at a fragment boundary
        if bootstrap.any():
            next_values[bootstrap] = self._bootstrap_values(batch, bootstrap)
        next_values[terminated] = 0.0
        deltas = rewards + cfg.gamma * next_values - values
        advantages = np.zeros_like(deltas)
        running = 0.0
        for i in range(len(deltas) - 1, -1, -1):
            running = deltas[i] + cfg.gamma * cfg.lam * running * continues[i]
            advantages[i] = running
        return advantages.astype(np.float32), (advantages + values).astype(np.float32)

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        cfg = self.config
        advantages, returns = self.advantages(batch)
        obs = torch.as_tensor(self.inputs(batch, "obs"))
        actions = torch.as_tensor(batch["actions"])
        old_logp = torch.as_tensor(batch["action_logp"])
        adv = torch.as_tensor(advantages)
        ret = torch.as_tensor(returns)
        mask = torch.as_tensor(batch["action_mask"]) if MASK_COLUMN in batch else None
        losses = []
        for _ in range(cfg.epochs):
            for index in torch.randperm(len(obs)).split(cfg.minibatch_size):  # type: ignore[no-untyped-call]
                out, values = self.model(obs[index])
                rows_mask = None if mask is None else mask[index]
                losses.append(
                    self.step(out, values, actions[index], old_logp[index], adv[index], ret[index], rows_mask)
                )
        policy_loss, value_loss = np.mean(losses, axis=0)
        return {"policy_loss": float(policy_loss), "value_loss": float(value_loss)}

    def step(
        self,
        out: torch.Tensor,
        values: torch.Tensor,
        actions: torch.Tensor,
        old_logp: torch.Tensor,
        adv: torch.Tensor,
        ret: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[float, float]:
        """One gradient step on a minibatch's model outputs; returns (policy loss, value loss)."""
        cfg = self.config
        dist = self._distribution(out, mask)
        ratio = (dist.log_prob(actions) - old_logp).exp()
        a = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)  # a minibatch of one row: 0, not NaN
        policy_loss = -torch.min(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a).mean()
        value_loss = 0.5 * (values - ret).pow(2).mean()
        loss = policy_loss + cfg.vf_coef * value_loss - cfg.ent_coef * dist.entropy().mean()
        self.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        return policy_loss.item(), value_loss.item()

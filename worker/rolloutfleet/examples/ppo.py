"""A PPO learner for a RolloutFleet job, written the way you would write your own.

It reads experience with :class:`rolloutfleet.BatchConsumer`, trains PPO with GAE and
publishes new weights with :class:`rolloutfleet.WeightPublisher`; the workers pick them
up between fragments. Run it next to a fleet::

    rolloutfleet run examples/cartpole.yaml -- python -m rolloutfleet.examples.ppo examples/cartpole.yaml

(``rolloutfleet run`` passes the Redis URL in ``ROLLOUTFLEET_REDIS_URL``.) The ``PPO``
class knows nothing about Redis: ``PPO.update(batch)`` takes any SampleBatch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet import RolloutJob, SampleBatch
from rolloutfleet.sampling.runners import build_model

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


class EpisodeReturns:
    """Returns of episodes completed in the batches seen so far (episodes span batches)."""

    def __init__(self, window: int = 20) -> None:
        self.running: dict[int, float] = {}
        self.completed: deque[float] = deque(maxlen=window)
        self.episodes = 0

    def add(self, batch: Mapping[str, np.ndarray]) -> None:
        ended = batch["terminateds"] | batch["truncateds"]
        for eps, reward, end in zip(batch["eps_id"].tolist(), batch["rewards"].tolist(), ended.tolist(), strict=True):
            total = self.running.get(eps, 0.0) + reward
            if end:
                self.completed.append(self.running.pop(eps, 0.0) + reward)
                self.episodes += 1
            else:
                self.running[eps] = total

    @property
    def mean(self) -> float:
        return float(np.mean(self.completed)) if self.completed else float("nan")


def main(argv: list[str] | None = None) -> int:
    from rolloutfleet import BatchConsumer, WeightPublisher

    parser = argparse.ArgumentParser(description="Train PPO on a RolloutFleet job's experience.")
    parser.add_argument("manifest", help="the job's RolloutJob YAML")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument(
        "--target-return", type=float, default=475.0, help="stop when the last 20 episodes average this"
    )
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--steps-per-update", type=int, default=4096)
    parser.add_argument("--max-policy-lag", type=int, default=2, help="drop rows sampled with older weights than this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-seq-len", type=int, default=20, help="stateful models: truncated-BPTT sequence length (rows)"
    )
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    model = build_model(job)
    probe_space = _action_space(job)
    ppo = make_ppo(model, probe_space, args.max_seq_len)
    weights = WeightPublisher(args.redis, job.name, namespace=job.namespace)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="ppo-learner")
    seq_no = weights.publish(model)
    returns = EpisodeReturns()
    steps, started = 0, time.monotonic()
    print(
        f"ppo: learning {job.name} from {args.redis}; target mean return {args.target_return} over 20 episodes",
        flush=True,
    )
    while steps < args.max_env_steps:
        batch = consumer.get(min_steps=args.steps_per_update, timeout=60.0)
        if batch is None or len(batch) == 0:
            print("ppo: no experience for 60 s; are the workers running?", file=sys.stderr, flush=True)
            continue
        returns.add(batch)
        steps += len(batch)
        fresh = batch["weights_seq_no"] >= seq_no - args.max_policy_lag
        if not fresh.any():
            continue  # all sampled with weights too old for on-policy learning: wait for newer
        stats = ppo.update(SampleBatch(batch).rows(fresh))
        seq_no = weights.publish(model)
        print(
            f"ppo: {steps:>8} env steps  {steps / (time.monotonic() - started):>7,.0f}/s  "
            f"return(last 20) {returns.mean:6.1f}  episodes {returns.episodes:>5}  weights v{seq_no}  "
            f"stale rows dropped {int((~fresh).sum()):>4}  vf loss {stats['value_loss']:.3f}",
            flush=True,
        )
        if len(returns.completed) == returns.completed.maxlen and returns.mean >= args.target_return:
            print(
                f"ppo: solved: mean return {returns.mean:.1f} after {steps} env steps, {time.monotonic() - started:.0f} s"
            )
            return 0
    print(f"ppo: not solved within {args.max_env_steps} env steps (mean return {returns.mean:.1f})", file=sys.stderr)
    return 1


def make_ppo(model: nn.Module, action_space: spaces.Space, max_seq_len: int = 20) -> PPO:  # type: ignore[type-arg]
    """:class:`PPO`, or for a stateful model (``policy.recurrent``) its sequence-replaying form."""
    from rolloutfleet.examples.ppo_recurrent import RecurrentPPO
    from rolloutfleet.inference.recurrent_model import is_stateful

    if is_stateful(model):
        return RecurrentPPO(model, action_space, max_seq_len=max_seq_len)
    return PPO(model, action_space)


def _action_space(job: RolloutJob) -> spaces.Space:  # type: ignore[type-arg]
    from rolloutfleet.sampling.envs import env_spaces

    return env_spaces(job.spec.env, 0, job.spec.replicas)[1]


if __name__ == "__main__":
    sys.exit(main())

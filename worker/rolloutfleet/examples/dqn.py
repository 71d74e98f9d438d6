"""An Ape-X-style DQN learner for a RolloutFleet job, written the way you would write your own.

The workers act ε-greedily on the job's model, whose outputs are read as Q-values
(``policy.exploration: {type: epsilonGreedy, perWorker: ...}``: worker i of N explores with
ε_i = 0.4^(1 + 7·i/(N−1)), as in Ape-X). This learner reads their experience with
:class:`rolloutfleet.BatchConsumer` into a replay buffer (uniform: no priorities), trains
double DQN with n-step returns and a target network, publishes the Q-network to the
workers with :class:`rolloutfleet.WeightPublisher` and the env steps consumed so far as the
job's global step with :class:`rolloutfleet.GlobalStepPublisher` (which an ε ``schedule``
would follow; the per-worker ε of Ape-X is constant and does not read it). Run it next to a
fleet::

    rolloutfleet run examples/dqn.yaml -- python -m rolloutfleet.examples.dqn examples/dqn.yaml

It judges itself by greedy evaluation: every ``--eval-every`` gradient steps it plays
``--eval-episodes`` episodes of the job's env with ε = 0 on its current Q-network and stops
when their mean return reaches ``--target-return``; past ``--time-limit`` it exits 1.
The ``DQN`` class knows nothing about Redis.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet import RolloutJob, build_model
from rolloutfleet.examples.ppo import EpisodeReturns


@dataclass(frozen=True)
class DQNConfig:
    gamma: float = 0.99
    n_step: int = 3
    """Ape-X's n-step returns (cut short where an episode chunk of a batch ends)."""
    double: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    lr: float = 5e-4
    batch_size: int = 128
    buffer_size: int = 100_000
    learning_starts: int = 2_000
    """Transitions in the buffer before the first gradient step."""
    train_ratio: float = 0.25
    """Gradient steps per env step consumed."""
    target_update_every: int = 250
    """Gradient steps between copies of the online network into the target network."""
    max_grad_norm: float = 10.0


def q_values(model: nn.Module, obs: torch.Tensor) -> torch.Tensor:
    """The Q-values are the model's action outputs (the logits the workers' ε-greedy argmaxes)."""
    out, _ = model(obs)
    return out  # type: ignore[no-any-return]


def nstep_transitions(batch: Mapping[str, np.ndarray], gamma: float, n: int) -> dict[str, np.ndarray]:
    """Each row's n-step transition: ``obs, actions``, ``returns`` (the discounted sum of the
    rewards of up to ``n`` rows of its episode chunk), ``next_obs`` (the ``new_obs`` of the last
    of them) and ``discounts`` (γ^k for k rows summed; 0 when the last one terminated).

    Chunks are found as in the PPO example (consecutive rows of one ``eps_id``, consecutive
    ``t``); a chunk cut by truncation or a fragment boundary bootstraps from its ``new_obs``.
    """
    rewards = batch["rewards"].astype(np.float64)
    terminated = batch["terminateds"].astype(np.bool_)
    ended = terminated | batch["truncateds"].astype(np.bool_)
    eps, t = batch["eps_id"], batch["t"]
    rows = len(rewards)
    continues = np.zeros(rows, np.bool_)
    continues[:-1] = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1) & ~ended[:-1]
    index = np.arange(rows)
    returns, last = rewards.copy(), index.copy()
    discounts = np.where(terminated, 0.0, gamma)
    alive = continues.copy()  # row i's chain goes on to row i + k
    for k in range(1, n):
        ext = alive.copy()
        ext[rows - k :] = False
        j = index[ext] + k
        returns[ext] += gamma**k * rewards[j]
        last[ext] = j
        discounts[ext] = np.where(terminated[j], 0.0, gamma ** (k + 1))
        alive = np.zeros(rows, np.bool_)
        alive[ext] = continues[j]
    return {
        "obs": batch["obs"],
        "actions": batch["actions"].astype(np.int64),
        "returns": returns.astype(np.float32),
        "next_obs": batch["new_obs"][last],
        "discounts": discounts.astype(np.float32),
    }


class ReplayBuffer:
    """A ring of the last ``capacity`` transitions, sampled uniformly."""

    def __init__(self, capacity: int, seed: int = 0) -> None:
        self.capacity = capacity
        self.columns: dict[str, np.ndarray] = {}
        self.size = 0
        self.cursor = 0
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, transitions: Mapping[str, np.ndarray]) -> None:
        transitions = {name: value[-self.capacity :] for name, value in transitions.items()}
        rows = len(transitions["returns"])
        if not self.columns:
            self.columns = {
                name: np.zeros((self.capacity, *value.shape[1:]), value.dtype) for name, value in transitions.items()
            }
        where = (self.cursor + np.arange(rows)) % self.capacity
        for name, value in transitions.items():
            self.columns[name][where] = value
        self.cursor = int((self.cursor + rows) % self.capacity)
        self.size = min(self.size + rows, self.capacity)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        index = self.rng.integers(0, self.size, batch_size)
        return {name: torch.from_numpy(column[index]) for name, column in self.columns.items()}


class DQN:
    """(Double) DQN with a target network on n-step transitions, Huber loss."""

    def __init__(self, model: nn.Module, config: DQNConfig | None = None) -> None:
        self.model = model
        self.config = config or DQNConfig()
        self.target = copy.deepcopy(model).requires_grad_(False)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=self.config.lr)
        self.updates = 0
        self.loss = float("nan")
        """The last gradient step's loss."""
        self._owed = 0.0

    def train(self, replay: ReplayBuffer, env_steps: int) -> int:
        """The gradient steps ``env_steps`` new env steps earn (``train_ratio`` each, fractions
        carried over), once the buffer holds ``learning_starts`` transitions; returns how many."""
        if len(replay) < self.config.learning_starts:
            return 0
        self._owed += env_steps * self.config.train_ratio
        taken = int(self._owed)
        for _ in range(taken):
            self.loss = self.update(replay.sample(self.config.batch_size))
        self._owed -= taken
        return taken

    def td_targets(self, returns: torch.Tensor, next_obs: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
        """``returns + discounts · Q_target(next_obs, a*)``, a* the argmax of the online network
        (double DQN) or of the target network."""
        with torch.no_grad():
            next_q = q_values(self.target, next_obs)
            chooser = q_values(self.model, next_obs) if self.config.double else next_q
            best = chooser.argmax(dim=1, keepdim=True)
            return returns + discounts * next_q.gather(1, best).squeeze(1)

    def update(self, sample: Mapping[str, torch.Tensor]) -> float:
        targets = self.td_targets(sample["returns"], sample["next_obs"], sample["discounts"])
        q = q_values(self.model, sample["obs"]).gather(1, sample["actions"].unsqueeze(1)).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, targets)
        self.optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.config.target_update_every == 0:
            self.target.load_state_dict(self.model.state_dict())
        return float(loss.item())


def greedy_returns(model: nn.Module, envs: list[Any], seed: int) -> np.ndarray:
    """One episode in each of ``envs`` (seeded ``seed``, ``seed + 1``, ...) acting by the argmax of
    the Q-values, the observations of the running episodes in one forward pass per step."""
    obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    totals = np.zeros(len(envs))
    running = list(range(len(envs)))
    while running:
        with torch.no_grad():
            batch = torch.as_tensor(np.stack([obs[i] for i in running]), dtype=torch.float32)
            actions = q_values(model, batch).argmax(dim=1).tolist()
        still = []
        for i, action in zip(running, actions, strict=True):
            obs[i], reward, terminated, truncated, _ = envs[i].step(action)
            totals[i] += float(reward)
            if not (terminated or truncated):
                still.append(i)
        running = still
    return totals


class ReturnsByEpsilon:
    """Returns of the fleet's completed episodes, per ε they were sampled with (one per worker)."""

    def __init__(self) -> None:
        self.by_scale: dict[float, EpisodeReturns] = {}

    def add(self, batch: Any) -> None:
        scales = batch["exploration_scale"] if "exploration_scale" in batch else np.zeros(len(batch), np.float32)
        for scale in np.unique(scales):
            self.by_scale.setdefault(float(scale), EpisodeReturns()).add(batch.rows(scales == scale))

    def summary(self) -> str:
        return " ".join(f"ε{scale:.3g}:{r.mean:.0f}" for scale, r in sorted(self.by_scale.items(), reverse=True))


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train Ape-X-style DQN on a RolloutFleet job's experience.")
    parser.add_argument("manifest", help="the job's RolloutJob YAML")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--target-return", type=float, default=475.0, help="stop when greedy evaluation averages this")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--eval-every", type=int, default=1000, help="gradient steps between greedy evaluations")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds before giving up (exit 1)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _refusal(job: RolloutJob, action_space: spaces.Space) -> str | None:  # type: ignore[type-arg]
    """One line saying why this job cannot be learned with DQN, or None."""
    if not isinstance(action_space, spaces.Discrete):
        return f"{job.name}: DQN needs a Discrete action space, the env has {action_space}"
    if job.spec.sampling.observation_filter != "none":
        return "spec.sampling.observationFilter: this DQN example trains on raw observations; set it to none"
    if job.spec.policy.exploration.type != "epsilonGreedy":
        return "spec.policy.exploration.type: the workers must act epsilonGreedy on the Q-values for DQN"
    return None


def main(argv: list[str] | None = None) -> int:
    from rolloutfleet import BatchConsumer, GlobalStepPublisher, WeightPublisher, env_creator, redacted_url

    args = _arguments(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    make_env = env_creator(job.spec.env, 0, job.spec.replicas)
    eval_envs = [make_env(i) for i in range(args.eval_episodes)]
    refusal = _refusal(job, eval_envs[0].action_space)
    if refusal is not None:
        print(f"dqn: {refusal}", file=sys.stderr)
        return 2
    cfg = DQNConfig()
    dqn = DQN(build_model(job), cfg)
    replay = ReplayBuffer(cfg.buffer_size, seed=args.seed)
    weights = WeightPublisher(args.redis, job.name, namespace=job.namespace)
    global_step = GlobalStepPublisher(args.redis, job)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="dqn-learner")
    seq_no = weights.publish(dqn.model)
    fleet = ReturnsByEpsilon()
    steps, evaluation = 0, float("nan")
    next_eval, started = args.eval_every, time.monotonic()
    print(
        f"dqn: learning {job.name} from {redacted_url(args.redis)}; target greedy return {args.target_return}",
        flush=True,
    )
    while (elapsed := time.monotonic() - started) < args.time_limit:
        batch = consumer.get(min_steps=1, timeout=60.0)
        if batch is None or len(batch) == 0:
            print("dqn: no experience for 60 s; are the workers running?", file=sys.stderr, flush=True)
            continue
        replay.add(nstep_transitions(batch, cfg.gamma, cfg.n_step))
        fleet.add(batch)
        steps += len(batch)
        global_step.set_global_step(steps)
        if not dqn.train(replay, len(batch)):
            continue
        seq_no = weights.publish(dqn.model)
        if dqn.updates < next_eval:
            continue
        next_eval = dqn.updates + args.eval_every
        evaluation = float(greedy_returns(dqn.model, eval_envs, seed=10_000 + dqn.updates).mean())
        print(
            f"dqn: {steps:>8} env steps  {dqn.updates:>6} updates  {elapsed:5.0f} s  greedy return {evaluation:6.1f}  "
            f"fleet returns by ε {fleet.summary()}  weights v{seq_no}  loss {dqn.loss:.3f}",
            flush=True,
        )
        if evaluation >= args.target_return:
            print(
                f"dqn: solved: greedy return {evaluation:.1f} over {args.eval_episodes} episodes after {steps} env "
                f"steps, {dqn.updates} updates, {time.monotonic() - started:.0f} s"
            )
            return 0
    print(
        f"dqn: not solved within {args.time_limit:.0f} s: last greedy return {evaluation:.1f} after {steps} env steps",
        file=sys.stderr,
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""PPO with torch's DistributedDataParallel: the ranks of one learner share one fleet.

Started by ``torchrun`` next to a fleet (gloo on CPU; nccl where the ranks have GPUs)::

    rolloutfleet run examples/cartpole.yaml -- \\
        torchrun --standalone --nproc-per-node 2 -m rolloutfleet.examples.ppo_ddp examples/cartpole.yaml

Every rank is one consumer (``rank-<n>``) of one consumer group, so each batch reaches
exactly one rank, and a rank that dies leaves its rows to the others (reclaimed after
``reclaim_idle_s``). ``get(min_steps=n, max_steps=n)`` gives every rank the same number of
rows, so their minibatch loops, and DDP's gradient all-reduces, stay in lock step. Rank 0
alone publishes weights (DDP keeps the ranks' parameters equal). The rows' rewards and
episode ends are gathered from every rank (an episode's fragments go to different ranks),
so every rank counts the same returns and stops at once.
The PPO itself is :class:`rolloutfleet.examples.ppo_algorithm.PPO`, unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from rolloutfleet import BatchConsumer, RolloutJob, WeightPublisher, build_model, env_spaces, redacted_url
from rolloutfleet.examples.ppo import EpisodeReturns
from rolloutfleet.examples.ppo_algorithm import PPO


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train PPO on a RolloutFleet job's experience with DDP ranks.")
    parser.add_argument("manifest", help="the job's RolloutJob YAML")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--target-return", type=float, default=475.0, help="stop when the ranks' last episodes average this")  # fmt: skip
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--steps-per-update", type=int, default=4096, help="rows of one update, over all ranks")
    parser.add_argument("--max-policy-lag", type=int, default=2, help="drop rows sampled with older weights than this")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    dist.init_process_group("gloo")  # torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    try:
        return train(args, dist.get_rank(), dist.get_world_size())
    finally:
        dist.destroy_process_group()


def train(args: argparse.Namespace, rank: int, world: int) -> int:
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    model = build_model(job)  # DDP starts every rank from rank 0's parameters
    ppo = PPO(DistributedDataParallel(model), env_spaces(job.spec.env, 0, job.spec.replicas)[1])
    per_rank = args.steps_per_update // world
    consumer = BatchConsumer(
        args.redis, job.name, namespace=job.namespace, group="ppo-ddp", consumer=f"rank-{rank}",
        max_policy_lag=args.max_policy_lag,
    )  # fmt: skip
    weights = WeightPublisher(args.redis, job.name, namespace=job.namespace) if rank == 0 else None
    seq_no = weights.publish(model) if weights is not None else 0
    returns, steps, learned, started = EpisodeReturns(), 0, 0, time.monotonic()
    say(rank, f"learning {job.name} from {redacted_url(args.redis)} with {world} ranks of {per_rank} rows an update")
    while steps < args.max_env_steps:
        batch = consumer.get(min_steps=per_rank, max_steps=per_rank, timeout=60.0)
        if batch is None:
            print(f"ppo-ddp rank {rank}: no experience for 60 s; are the workers running?", file=sys.stderr, flush=True)
            continue  # the other ranks wait in the update's all-reduce meanwhile
        stats = ppo.update(batch)
        learned += len(batch)
        returns.add(gathered(batch, world))  # the same episodes on every rank: they stop at once
        steps += per_rank * world
        mean = returns.mean
        if weights is not None:
            seq_no = weights.publish(model)
        say(rank, f"{steps:>8} env steps  {steps / (time.monotonic() - started):>7,.0f}/s  return {mean:6.1f}  "
                  f"weights v{seq_no}  vf loss {stats['value_loss']:.3f}")  # fmt: skip
        if len(returns.completed) == returns.completed.maxlen and mean >= args.target_return:
            say(rank, f"solved: mean return {mean:.1f} after {steps} env steps, {time.monotonic() - started:.0f} s")
            consumer.commit()
            say(rank, f"rows learned by each rank: {by_rank(learned, world)}")
            return 0
    say(rank, f"not solved within {args.max_env_steps} env steps")
    return 1


def gathered(batch: Mapping[str, np.ndarray], world: int) -> dict[str, np.ndarray]:
    """Every rank's rows of one update (episode, step, reward, end), in episode order: the
    fragments of one episode go to different ranks, so no rank alone sees its return. The
    ranks hold the same number of rows (``max_steps``), as ``all_gather`` wants."""
    ended = batch["terminateds"] | batch["truncateds"]
    ints = torch.as_tensor(np.stack([batch["eps_id"], batch["t"], ended], axis=1).astype(np.int64))
    rewards = torch.as_tensor(batch["rewards"].astype(np.float64))
    every_ints, every_rewards = [torch.empty_like(ints) for _ in range(world)], [torch.empty_like(rewards) for _ in range(world)]  # fmt: skip
    dist.all_gather(every_ints, ints)
    dist.all_gather(every_rewards, rewards)
    rows, rewards_all = torch.cat(every_ints).numpy(), torch.cat(every_rewards).numpy()
    order = np.lexsort((rows[:, 1], rows[:, 0]))
    ends = rows[order, 2].astype(np.bool_)
    return {
        "eps_id": rows[order, 0],
        "rewards": rewards_all[order],
        "terminateds": ends,
        "truncateds": np.zeros_like(ends),
    }


def by_rank(value: int, world: int) -> list[int]:
    """``value`` of every rank, in rank order."""
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(every, torch.tensor([value], dtype=torch.int64))
    return [int(v) for v in every]


def say(rank: int, line: str) -> None:
    if rank == 0:
        print(f"ppo-ddp: {line}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

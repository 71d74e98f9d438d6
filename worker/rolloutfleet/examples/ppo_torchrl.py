"""PPO from TorchRL's own components on a RolloutFleet job: its ``GAE``, ``ClipPPOLoss`` and
``ReplayBuffer``, fed by :class:`rolloutfleet.integrations.torchrl.FleetCollector` in place of
a TorchRL collector. Run it next to a fleet (needs ``rolloutfleet[torchrl]``)::

    rolloutfleet run examples/cartpole.yaml -- python -m rolloutfleet.examples.ppo_torchrl examples/cartpole.yaml

The actor and the critic are TorchRL modules around the workers' own network
(:func:`~rolloutfleet.integrations.torchrl.fleet_policy`), so what the learner publishes is
what the workers run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from rolloutfleet import BatchConsumer, RolloutJob, WeightPublisher, redacted_url
from rolloutfleet.integrations.torchrl import FleetCollector, fleet_policy


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train TorchRL's PPO on a RolloutFleet job's experience.")
    parser.add_argument("manifest", help="the job's RolloutJob YAML")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--target-return", type=float, default=450.0, help="stop when the last 20 episodes average this")  # fmt: skip
    parser.add_argument("--max-env-steps", type=int, default=2_000_000)
    parser.add_argument("--frames-per-batch", type=int, default=4096)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--minibatch", type=int, default=512)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-policy-lag", type=int, default=2, help="drop rows sampled with older weights than this")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    policy = fleet_policy(job)
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=policy.critic)
    loss = ClipPPOLoss(policy.actor, policy.critic, clip_epsilon=0.2, entropy_coeff=0.0, critic_coeff=0.5,
                       loss_critic_type="l2", normalize_advantage=True)  # fmt: skip
    optimizer = torch.optim.Adam(loss.parameters(), lr=args.lr, eps=1e-5)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.frames_per_batch * 2), sampler=SamplerWithoutReplacement(),
                          batch_size=args.minibatch)  # fmt: skip
    publisher = WeightPublisher(args.redis, job.name, namespace=job.namespace)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="torchrl-ppo",
                             max_policy_lag=args.max_policy_lag)  # fmt: skip
    collector = FleetCollector(consumer, frames_per_batch=args.frames_per_batch, total_frames=args.max_env_steps)
    seq_no = publisher.publish(policy.network)
    started = time.monotonic()
    print(f"ppo-torchrl: learning {job.name} from {redacted_url(args.redis)}; target {args.target_return}", flush=True)
    for data in collector:
        with torch.no_grad():
            advantage(data)
        buffer.empty()
        buffer.extend(data)
        for _ in range(args.epochs * max(1, len(data) // args.minibatch)):
            losses = loss(buffer.sample())
            total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
            optimizer.zero_grad()
            total.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
            optimizer.step()
        seq_no = publisher.publish(policy.network)
        returns = collector.returns
        print(f"ppo-torchrl: {collector.frames:>8} env steps  return(last 20) {returns.mean:6.1f}  "
              f"episodes {returns.episodes:>5}  weights v{seq_no}  critic loss {float(losses['loss_critic']):.3f}",
              flush=True)  # fmt: skip
        if len(returns.completed) == returns.completed.maxlen and returns.mean >= args.target_return:
            collector.commit()
            print(f"ppo-torchrl: solved: mean return {returns.mean:.1f} after {collector.frames} env steps, "
                  f"{time.monotonic() - started:.0f} s", flush=True)  # fmt: skip
            return 0
    print(f"ppo-torchrl: not solved within {args.max_env_steps} env steps", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""A PPO learner for a RolloutFleet job, written the way you would write your own.

It reads experience with :class:`rolloutfleet.BatchConsumer`, trains PPO with GAE and
publishes new weights with :class:`rolloutfleet.WeightPublisher`; the workers pick them
up between fragments. Run it next to a fleet::

    rolloutfleet run examples/cartpole.yaml -- python -m rolloutfleet.examples.ppo examples/cartpole.yaml

(``rolloutfleet run`` passes the Redis URL in ``ROLLOUTFLEET_REDIS_URL``.) The ``PPO``
class (:mod:`.ppo_algorithm`) knows nothing about Redis: ``PPO.update(batch)`` takes any
SampleBatch; :func:`make_ppo` picks it or :class:`.ppo_recurrent.RecurrentPPO`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from gymnasium import spaces
from torch import nn

from rolloutfleet import EpisodeReturns, RolloutJob, SampleBatch, build_model, env_spaces, is_stateful
from rolloutfleet.examples.ppo_algorithm import PPO, PPOConfig
from rolloutfleet.examples.ppo_recurrent import RecurrentPPO

# PPO, PPOConfig and EpisodeReturns are re-exported: ``from rolloutfleet.examples.ppo import PPO`` keeps working.
__all__ = ["PPO", "EpisodeReturns", "PPOConfig", "main", "make_ppo"]


def main(argv: list[str] | None = None) -> int:
    from rolloutfleet import BatchConsumer, WeightPublisher, redacted_url

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
        f"ppo: learning {job.name} from {redacted_url(args.redis)}; target mean return {args.target_return} over 20 episodes",
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
    if is_stateful(model):
        return RecurrentPPO(model, action_space, max_seq_len=max_seq_len)
    return PPO(model, action_space)


def _action_space(job: RolloutJob) -> spaces.Space:  # type: ignore[type-arg]
    return env_spaces(job.spec.env, 0, job.spec.replicas)[1]


if __name__ == "__main__":
    sys.exit(main())

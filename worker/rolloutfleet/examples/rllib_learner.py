"""RLlib's own algorithms (new API stack: its learners, connectors, losses and replay buffers)
learning from a RolloutFleet job: :func:`rolloutfleet.integrations.rllib.on_fleet` puts the fleet
where RLlib's env runners would be. ``--algo ppo`` (on-policy) or ``--algo dqn`` (off-policy,
a replay buffer). Run it next to a fleet (needs ``rolloutfleet[rllib]``; ``make demo-rllib``)::

    rolloutfleet run examples/cartpole.yaml -- python -m rolloutfleet.examples.rllib_learner examples/cartpole.yaml
    rolloutfleet run examples/dqn.yaml -- python -m rolloutfleet.examples.rllib_learner examples/dqn.yaml --algo dqn

``--peer`` trains the same config with RLlib's own env runners instead (no fleet, no Redis): the
comparison docs/benchmarks.md quotes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import deque
from typing import Any

from rolloutfleet import RolloutJob


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Train RLlib's PPO or DQN on a RolloutFleet job's experience.")
    parser.add_argument("manifest", help="the job's RolloutJob YAML")
    parser.add_argument("--algo", choices=["ppo", "dqn"], default="ppo")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL"), help="the fleet's Redis (default $ROLLOUTFLEET_REDIS_URL)")  # fmt: skip
    parser.add_argument("--target-return", type=float, default=450.0, help="stop when RLlib's episode_return_mean averages this over the last --window training iterations")  # fmt: skip
    parser.add_argument("--window", type=int, default=5, help="training iterations the target is averaged over")  # fmt: skip
    parser.add_argument(
        "--max-env-steps",
        type=int,
        default=10_000_000,
        help="stop after this many env steps sampled (rows too old to train on included)",
    )
    parser.add_argument("--time-limit", type=float, default=900.0, help="give up (exit 1) after this many seconds")
    parser.add_argument(
        "--train-batch",
        type=int,
        help="train_batch_size_per_learner (default: one fragment of every worker, replicas x numEnvs x rolloutFragmentLength)",
    )
    parser.add_argument("--max-policy-lag", type=int, help="drop rows sampled with older weights than this (default: PPO 1, DQN none)")  # fmt: skip
    parser.add_argument("--peer", action="store_true", help="RLlib's own env runners (spec.replicas of them) instead of the fleet")  # fmt: skip
    parser.add_argument("--json", help="write the run's figures here")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def algo_config(job: RolloutJob, args: argparse.Namespace) -> Any:
    """One config for both runs (the fleet's, RLlib's own env runners'): the job's network."""
    return dqn_config(job, args) if args.algo == "dqn" else ppo_config(job, args)


def dqn_config(job: RolloutJob, args: argparse.Namespace) -> Any:
    """DQN as RLlib tunes it for CartPole (double Q, n-step, prioritized replay), with the job's
    network: no dueling heads (the workers' network has one head)."""
    from ray.rllib.algorithms.dqn import DQNConfig

    from rolloutfleet.integrations.rllib import job_model_config

    return (
        DQNConfig()
        .training(
            lr=5e-4,
            train_batch_size_per_learner=args.train_batch or 32,
            replay_buffer_config={
                "type": "PrioritizedEpisodeReplayBuffer",
                "capacity": 50_000,
                "alpha": 0.6,
                "beta": 0.4,
            },
            n_step=3,
            double_q=True,
            dueling=False,
        )
        .rl_module(model_config=job_model_config(job))
        .learners(num_learners=0)
        .debugging(seed=args.seed)
    )


def ppo_config(job: RolloutJob, args: argparse.Namespace) -> Any:
    """PPO with RLlib's CartPole settings and the job's network."""
    from ray.rllib.algorithms.ppo import PPOConfig

    from rolloutfleet.integrations.rllib import job_model_config

    spec = job.spec
    batch = args.train_batch or spec.replicas * spec.env.num_envs * spec.sampling.rollout_fragment_length
    return (
        PPOConfig()
        .training(
            lr=3e-4,
            gamma=0.99,
            lambda_=0.95,
            num_epochs=6,
            minibatch_size=min(500, batch),
            vf_loss_coeff=0.5,
            entropy_coeff=0.0,
            train_batch_size_per_learner=batch,
        )
        .rl_module(model_config=job_model_config(job))
        .learners(num_learners=0)
        .debugging(seed=args.seed)
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import ray

    from rolloutfleet.integrations.rllib import on_fleet

    job = RolloutJob.from_file(args.manifest)
    ray.init(num_cpus=max(2, job.spec.replicas + 1), include_dashboard=False, log_to_driver=False, configure_logging=False)  # fmt: skip
    config = algo_config(job, args)
    if args.peer:
        spec = job.spec
        config = config.environment(spec.env.id, env_config=dict(spec.env.config)).env_runners(
            num_env_runners=spec.replicas, num_envs_per_env_runner=spec.env.num_envs,
            rollout_fragment_length=spec.sampling.rollout_fragment_length)  # fmt: skip
    else:
        lag = args.max_policy_lag if args.max_policy_lag is not None else (1 if args.algo == "ppo" else None)
        config = on_fleet(config, job, args.redis, group=f"rllib-{args.algo}", max_policy_lag=lag)
    algo = config.build_algo()
    began, steps, trained, rows_version, mean = time.monotonic(), 0, 0, None, float("nan")
    recent: deque[float] = deque(maxlen=args.window)
    name = f"{args.algo}-rllib" + (" (RLlib's env runners)" if args.peer else "")
    try:
        while steps < args.max_env_steps and time.monotonic() - began < args.time_limit:
            result = algo.train()
            runners = result.get("env_runners", {})
            steps = int(runners.get("num_env_steps_sampled_lifetime", steps))
            trained = int(result.get("learners", {}).get("__all_modules__", {}).get("num_module_steps_trained_lifetime", trained))  # fmt: skip
            if (newest := runners.get("rolloutfleet/weights_seq_no")) is not None:
                rows_version = int(newest)
            latest = float(runners.get("episode_return_mean", float("nan")))
            if not math.isnan(latest):
                recent.append(latest)
            mean = sum(recent) / len(recent) if len(recent) == recent.maxlen else float("nan")
            print(f"{name}: {steps} env steps, mean return {latest:.1f} (last {args.window}: {mean:.1f}), {time.monotonic() - began:.0f} s", flush=True)  # fmt: skip
            if mean >= args.target_return:
                break
    finally:
        algo.stop()
        ray.shutdown()
    seconds = time.monotonic() - began
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"algo": args.algo, "runner": "rllib" if args.peer else "fleet", "env_steps": steps, "seconds": seconds,
                       "env_steps_per_s": steps / seconds, "module_steps_trained": trained,
                       "rows_trained": trained // config.num_epochs if args.algo == "ppo" else None,
                       "rows_weights_seq_no": rows_version, "mean_return": mean, "solved": mean >= args.target_return}, out)  # fmt: skip
    if mean >= args.target_return:
        print(f"{name}: solved: mean return {mean:.1f} >= {args.target_return:g} after {steps} env steps in {seconds:.0f} s")  # fmt: skip
        return 0
    print(f"{name}: not solved: mean return {mean:.1f} after {steps} env steps in {seconds:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""The learner of ``make soak``: PPO on the fleet's batches, new weights after every update.

It is the example PPO learner (:mod:`rolloutfleet.examples.ppo`) without its stopping
rule: a soak wants the same steady work for as long as it runs, so it trains on whatever
arrives until SIGTERM (``rolloutfleet run`` sends it when the fleet stops). Every update
publishes new weights, so the workers load a new version every few fragments and the
weight path is soaked too. After each update it writes its counters to ``--stats`` (JSON,
replaced atomically), which :mod:`bench.soak` reads::

    rolloutfleet run examples/cartpole.yaml -- python -m bench.soak_learner examples/cartpole.yaml --stats s.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

import torch

from rolloutfleet import BatchConsumer, RolloutJob, SampleBatch, WeightPublisher
from rolloutfleet.examples.ppo import PPO, _action_space
from rolloutfleet.fleet.runner_factory import build_model


def write_stats(path: Path, stats: dict[str, object]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(stats))
    os.replace(partial, path)  # the reader never sees half a file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest")
    parser.add_argument("--redis", default=os.environ.get("ROLLOUTFLEET_REDIS_URL", "redis://localhost:6379/0"))
    parser.add_argument("--stats", type=Path, required=True, help="where to write the counters (JSON)")
    parser.add_argument("--steps-per-update", type=int, default=4096)
    parser.add_argument("--max-policy-lag", type=int, default=2)
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    job = RolloutJob.from_file(args.manifest)
    model = build_model(job)
    ppo = PPO(model, _action_space(job))
    weights = WeightPublisher(args.redis, job.name, namespace=job.namespace)
    consumer = BatchConsumer(args.redis, job.name, namespace=job.namespace, group="soak-learner")
    seq_no = weights.publish(model)
    batches = env_steps = updates = 0
    started = time.time()
    while not stopping:
        batch = consumer.get(min_steps=args.steps_per_update, timeout=2.0)
        if batch is None:
            continue
        batches += 1
        env_steps += len(batch)
        fresh = batch["weights_seq_no"] >= seq_no - args.max_policy_lag
        if fresh.any():
            ppo.update(SampleBatch(batch).rows(fresh))
            seq_no = weights.publish(model)
            updates += 1
        write_stats(
            args.stats,
            {
                "started": started,
                "updated": time.time(),
                "batches": batches,
                "env_steps": env_steps,
                "updates": updates,
                "weights_seq_no": seq_no,
                "consumer": dataclasses.asdict(consumer.stats),
            },
        )
    consumer.close()
    weights.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The TorchRL collector against a real redis-server, and TorchRL's own PPO learning from a
real fleet (`make demo-torchrl`'s learner, to a lower target): batches of whole fragments,
acknowledged when the next is asked for, episode returns counted across fragments."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.integrations.torchrl import FleetCollector
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


def test_the_collector_yields_whole_fragments_and_acknowledges_them_when_the_next_is_asked_for(redis_url: str) -> None:
    job = RolloutJob.from_file(REPO / "examples" / "cartpole.yaml")
    runner, publisher = EnvRunner(job), BatchPublisher(redis_url, job)
    sizes = []
    for _ in range(4):
        fragment = runner.sample()
        sizes.append(len(fragment))
        publisher.publish(fragment)
    consumer = BatchConsumer(redis_url, job, block_s=0.05, read_count=1)
    collector = FleetCollector(consumer, frames_per_batch=sizes[0] + 1, total_frames=sum(sizes))
    batches = iter(collector)
    first = next(batches)
    assert len(first) == sizes[0] + sizes[1]  # whole fragments, at least frames_per_batch rows
    assert consumer.lag().pending == 2  # in the learner's hands until it asks for more
    second = next(batches)
    assert len(second) == sizes[2] + sizes[3] and consumer.lag().pending == 2
    assert list(batches) == [] and consumer.lag().pending == 0  # total_frames reached: all acknowledged
    assert collector.frames == sum(sizes) and collector.returns.episodes > 0


def test_torchrl_ppo_learns_from_a_fleet_through_rolloutfleet_run() -> None:
    learner = [sys.executable, "-m", "rolloutfleet.examples.ppo_torchrl", "examples/cartpole.yaml", "--target-return", "60"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO / "worker")}
    done = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", "examples/cartpole.yaml", "--no-status", "--", *learner],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "ppo-torchrl: solved: mean return" in out, out[-3000:]

"""Waiting on real worker processes: read what they published, with deadlines."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message


def small_job(name: str = "fleet", replicas: int = 2, **restart: float) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "env": {"id": "CartPole-v1", "numEnvs": 2},
                "sampling": {"rolloutFragmentLength": 50, "seed": 0},
                "redis": {"maxLen": 200, "backpressure": "dropOldest"},
                "restartPolicy": {"maxRestarts": 5, "backoffSeconds": 0.2, "backoffLimitSeconds": 1, **restart},
            },
        }
    )


def read_until(consumer: BatchConsumer, done: Callable[[list[Message]], bool], timeout: float) -> list[Message]:
    """Read (and ack) messages until ``done(all_messages)`` or the deadline; returns them all."""
    seen: list[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = consumer.read(timeout=1.0)
        for message in batch:
            message.ack()
        seen += batch
        if done(seen):
            return seen
    raise AssertionError(f"gave up after {timeout:.0f} s with {len(seen)} messages: {[m.metadata for m in seen][-5:]}")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` every 0.2 s; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


APPETITE = 400.0  # rows/s a StarvingLearner takes
STEP_S = 0.005  # a paced worker's env step (tests.integration.fleet.paced_env): at most 200 rows/s per worker


class StarvingLearner(threading.Thread):
    """A learner of job ``job`` that takes 40-row batches (two 20-row entries a read), then
    'trains' 40 / ``appetite`` s: APPETITE rows/s when never starved, more than a few paced
    workers feed it (the autoscaler's tests)."""

    def __init__(self, url: str, job: str, name: str, namespace: str = "default") -> None:
        super().__init__(daemon=True)
        self.consumer = BatchConsumer(url, job, namespace=namespace, consumer=name, block_s=0.2, read_count=2)
        self.stop = threading.Event()
        self.batches = 0
        self.appetite = APPETITE

    def run(self) -> None:
        while not self.stop.is_set():
            if self.consumer.get(min_steps=40, timeout=0.5) is not None:
                self.batches += 1
                time.sleep(40 / self.appetite)
        self.consumer.close()

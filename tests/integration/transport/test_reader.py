"""Looking at a fleet's batches never holds it back: real workers, ``block`` backpressure
with ``maxLen: 4`` (as examples/cartpole.yaml), ``rolloutfleet consume`` as the CLI runs it."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import redis

from rolloutfleet.cli.streams import add_consume_parser
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet_helpers import small_job, wait_until

MAX_LEN = 4
ROWS = 100  # per batch: 2 sub-envs x 50 steps


def blocking_job(name: str) -> RolloutJob:
    spec = small_job(name, replicas=1).to_dict()["spec"]
    spec["redis"] = {"maxLen": MAX_LEN, "backpressure": "block"}
    return RolloutJob.from_dict({"metadata": {"name": name}, "spec": spec})


def fleet_of(job: RolloutJob, redis_url: str) -> LocalFleet:
    # Groups idle for 3 s stop counting, so the test need not wait the default 2 minutes.
    return LocalFleet(job, redis_url=redis_url, extra_env={"ROLLOUTFLEET_LEARNER_IDLE_SECONDS": "3"})


def consume(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    add_consume_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["consume", *argv])
    return int(args.run(args))


@contextmanager
def learner(redis_url: str, job: RolloutJob) -> Iterator[list[Message]]:
    """A learner reading and acking in the background; yields what it has received so far."""
    consumer = BatchConsumer(redis_url, job.name, consumer="test-learner", block_s=0.2)
    received: list[Message] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            messages = consumer.read(timeout=0.5)
            consumer.ack(messages)
            received.extend(messages)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield received
    finally:
        stop.set()
        thread.join(10)
        consumer.close()


def groups(redis_url: str, job: RolloutJob) -> dict[str, dict[str, object]]:
    client = redis.Redis.from_url(redis_url)
    return {g["name"].decode(): g for g in client.xinfo_groups(job_keys(job.namespace, job.name).batches)}


def test_an_inspection_group_left_behind_does_not_stall_the_fleet(redis_url: str, tmp_path: Path) -> None:
    """Defect: `consume --group inspect --count 3` left a group whose lag reached maxLen and
    stopped every worker for good."""
    job = blocking_job("inspected")
    with fleet_of(job, redis_url), learner(redis_url, job) as received:
        wait_until(lambda: len(received) >= 2, 120, "the learner's first batches")
        output = tmp_path / "inspect.npz"
        assert consume("--redis", redis_url, "--job", job.name, "--count", "3", "--output", str(output),
                       "--group", "inspect", "--timeout", "60") == 0  # fmt: skip
        after_inspection = len(received)
        # Far past the old stall point (the inspect group maxLen entries behind).
        wait_until(lambda: len(received) >= after_inspection + 3 * MAX_LEN, 120, "the fleet going on")
        left_behind = groups(redis_url, job)["inspect"]
        assert int(left_behind["lag"]) > MAX_LEN  # behind by more than maxLen, and nobody waited for it


def test_consume_as_the_learner_reads_more_than_max_len(redis_url: str, tmp_path: Path) -> None:
    """Defect: `consume --count 6` with maxLen 4 and block waited for workers that waited for
    the 4 entries it held unacknowledged, and gave up with "4 of 6 batches"."""
    job = blocking_job("deadlock")
    with fleet_of(job, redis_url):
        output = tmp_path / "six.npz"
        assert consume("--redis", redis_url, "--job", job.name, "--count", "6", "--output", str(output),
                       "--group", "learner", "--timeout", "60") == 0  # fmt: skip
        with np.load(output, allow_pickle=False) as data:
            assert len(data["obs"]) == 6 * ROWS
        assert int(groups(redis_url, job)["learner"]["pending"]) == 0


def test_consume_without_a_group_beside_a_learner_reads_any_count_and_leaves_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    job = blocking_job("looked-at")
    with fleet_of(job, redis_url), learner(redis_url, job) as received:
        wait_until(lambda: len(received) >= 1, 120, "the learner's first batch")
        output = tmp_path / "look.npz"
        assert consume("--redis", redis_url, "--job", job.name, "--count", str(3 * MAX_LEN), "--output",
                       str(output), "--timeout", "60") == 0  # fmt: skip
        with np.load(output, allow_pickle=False) as data:
            assert len(data["obs"]) == 3 * MAX_LEN * ROWS
        assert list(groups(redis_url, job)) == ["learner"]

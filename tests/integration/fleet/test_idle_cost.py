"""What a waiting worker costs Redis, read from Redis's own counters (``INFO commandstats``):
real ``rolloutfleet worker`` processes with a full ``block`` stream and no learner. A
fleet of 10 000 waiting workers must not saturate the Redis its learner's return depends
on, so a waiting worker blocks on the job's room signal instead of polling the stream, and
costs a few commands a second, whatever the wait's length. When a learner comes, every
worker publishes again at once (the learner's first read and each ack signal room)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.transport.redis.clients import read_client_limit, worker_connections
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_redis_faults import Learner, metric
from tests.integration.fleet.test_worker import start_worker
from tests.integration.fleet_helpers import small_job, wait_until
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "w")
WORKERS = 3
MEASURED_S = 20.0  # two re-measurements of each waiting worker (REMEASURE_S) inside
MOST_COMMANDS_PER_S = 3.0
"""A waiting worker's budget: 10 000 of them then send Redis 30 000 commands a second at most."""


def commands(server: RedisServer) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, as Redis counts them."""
    stats: dict[str, Any] = server.client().info("commandstats")
    return {name.removeprefix("cmdstat_"): int(values["calls"]) for name, values in stats.items()}


def idle_commands_per_worker_s(server: RedisServer) -> float:
    """Commands a second a worker sends Redis over :data:`MEASURED_S`, from Redis's counters."""
    server.client().config_resetstat()
    time.sleep(MEASURED_S)
    calls = commands(server)
    calls.pop("config|resetstat", None)
    calls.pop("info", None)
    per_worker_s = sum(calls.values()) / WORKERS / MEASURED_S
    print(f"{per_worker_s:.2f} commands/s a waiting worker: {calls}")
    return per_worker_s


def test_a_waiting_worker_costs_redis_a_few_commands_a_second_and_all_resume_for_a_learner(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    job = small_job("w", replicas=WORKERS)
    spec = job.to_dict()["spec"]
    spec["redis"] = {"maxLen": 2, "backpressure": "block", "blockTimeoutSeconds": 3600}
    ports = [free_port() for _ in range(WORKERS)]
    workers = []
    for index, port in enumerate(ports):
        log = (tmp_path / f"worker-{index}.log").open("w")
        workers.append(
            start_worker(
                own_redis.url,
                port,
                tmp_path,
                stderr=log,
                ROLLOUTFLEET_SPEC=json.dumps(spec),
                ROLLOUTFLEET_WORKER_INDEX=str(index),
                ROLLOUTFLEET_NUM_WORKERS=str(WORKERS),
            )
        )
    try:
        wait_until(
            lambda: (
                all(metric(port, "rolloutfleet_waiting_for_learner") == 1 for port in ports)
                or any(w.poll() is not None for w in workers)
            ),
            120,
            "every worker waiting for a learner",
        )
        assert all(w.poll() is None for w in workers), [p.read_text()[-1500:] for p in tmp_path.glob("worker-*.log")]
        # The connections the operator budgets a worker (RedisConnectionsFit), as Redis counts them.
        limit = read_client_limit(own_redis.url)
        assert limit is not None and limit.connected == WORKERS * worker_connections(job) == 6, limit
        assert idle_commands_per_worker_s(own_redis) <= MOST_COMMANDS_PER_S  # nobody has read yet
        # Waiting, not dropping: full (publishers measuring at once overshoot maxLen by one
        # entry each at most), and nothing trimmed of all Redis ever added to the stream.
        stream = own_redis.client().xinfo_stream(KEYS.batches)
        assert 2 <= stream["length"] <= 2 + WORKERS and stream["length"] == stream["entries-added"], stream

        with Learner(own_redis.url) as learner:
            # Every worker's fragment in hand reaches the learner: none of them sleeps through its arrival.
            wait_until(lambda: {m.metadata.worker_index for m in learner.received} == set(range(WORKERS)), 60,
                       "a batch from every worker")  # fmt: skip
            assert learner.error is None, learner.error
        # The learner paused (a checkpoint): its group still holds the fleet back, and the
        # workers wait for its next ack on the signal, not by polling.
        wait_until(lambda: own_redis.client().hget(KEYS.backpressure, "group") == b"learner", 60,
                   "the record of the paused learner holding the workers back")  # fmt: skip
        time.sleep(3)  # the others' fragments in hand published too: every worker waits (or costs more)
        assert idle_commands_per_worker_s(own_redis) <= MOST_COMMANDS_PER_S
        with Learner(own_redis.url) as learner:
            wait_until(lambda: {m.metadata.worker_index for m in learner.received} == set(range(WORKERS)), 60,
                       "a batch from every worker after the pause")  # fmt: skip
            assert learner.error is None, learner.error
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)

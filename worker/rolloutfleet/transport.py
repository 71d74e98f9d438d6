"""What a worker process does with Redis, in one object: publish batches, poll weights,
write a heartbeat. :mod:`rolloutfleet.worker` drives it and owns the retry loop::

    transport = WorkerTransport(config)
    update = transport.poll_weights()           # None unless newer weights exist
    transport.publish(batch, runner.weights_seq_no)
    transport.heartbeat(runner.get_metrics())

Heartbeats are a hash per job (:attr:`rolloutfleet.redis_keys.JobKeys.heartbeats`):
worker index -> JSON of ``env_steps`` (lifetime), ``steps_per_s``, ``episode_return_mean``,
``weights_seq_no`` and ``time`` (unix seconds); the hash expires when no worker writes
it for :data:`HEARTBEAT_TTL_S`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from rolloutfleet.publisher import BackpressureTimeout, BatchPublisher
from rolloutfleet.redis_connection import RETRYABLE, connect
from rolloutfleet.redis_keys import job_keys
from rolloutfleet.spec import RolloutJob
from rolloutfleet.weights import WeightSubscriber, WeightsUpdate

if TYPE_CHECKING:
    from rolloutfleet.batch import SampleBatch
    from rolloutfleet.worker_config import WorkerConfig

HEARTBEAT_TTL_S = 300


class WorkerTransport:
    """The worker's Redis side, configured by its :class:`WorkerConfig`.

    ``retryable`` lists the errors after which the worker should back off and call again
    (Redis away, or the learner not keeping up under ``block`` backpressure).
    """

    retryable: tuple[type[Exception], ...] = (*RETRYABLE, BackpressureTimeout)

    def __init__(self, config: WorkerConfig) -> None:
        job = config.job
        self.worker_index = config.worker_index
        self.keys = job_keys(job.namespace, job.name)
        # Short reconnect window: the worker's own loop backs off and keeps the fragment.
        self.publisher = BatchPublisher(config.redis_url, job, password=config.redis_password, reconnect_timeout_s=2.0)
        self.weights = WeightSubscriber(config.redis_url, job, password=config.redis_password)
        self.client = self.publisher.client

    def poll_weights(self) -> WeightsUpdate | None:
        return self.weights.poll()

    def publish(self, batch: SampleBatch, weights_seq_no: int) -> None:
        self.publisher.publish(batch, weights_seq_no=weights_seq_no, worker_index=self.worker_index)

    def heartbeat(self, stats: Mapping[str, float | int]) -> None:
        beat = {
            "env_steps": stats.get("num_env_steps_sampled_lifetime", 0),
            "steps_per_s": stats.get("env_steps_per_s", 0.0),
            "episode_return_mean": stats.get("episode_return_mean", float("nan")),
            "weights_seq_no": stats.get("weights_seq_no", 0),
            "time": time.time(),
        }
        pipe = self.client.pipeline(transaction=False)
        pipe.hset(self.keys.heartbeats, str(self.worker_index), json.dumps(beat))
        pipe.expire(self.keys.heartbeats, HEARTBEAT_TTL_S)
        pipe.execute()

    def close(self) -> None:
        self.publisher.close()
        self.weights.close()


def read_heartbeats(redis_url: str, job: RolloutJob, password: str | None = None) -> dict[int, dict[str, float]]:
    """Worker index -> its last heartbeat; empty when Redis cannot be reached (a status
    display must keep going while Redis restarts)."""
    keys = job_keys(job.namespace, job.name)
    client = connect(redis_url, password, socket_timeout=2.0, connect_timeout=1.0)
    try:
        raw = client.hgetall(keys.heartbeats)
    except RETRYABLE:
        return {}
    finally:
        client.close()
    beats: dict[int, dict[str, float]] = {}
    for index, value in raw.items():
        try:
            beats[int(index)] = {k: float(v) for k, v in json.loads(value).items()}
        except (ValueError, TypeError, AttributeError):
            continue  # a foreign or half-upgraded entry: not worth failing a status table for
    return beats

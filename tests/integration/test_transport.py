"""The worker's Redis side (WorkerTransport) and the heartbeats the local fleet reads."""

from __future__ import annotations

import numpy as np
import pytest

from rolloutfleet.batch import SampleBatch
from rolloutfleet.consumer import BatchConsumer
from rolloutfleet.publisher import BackpressureTimeout
from rolloutfleet.spec import RolloutJob
from rolloutfleet.transport import WorkerTransport, read_heartbeats
from rolloutfleet.weights import WeightPublisher
from rolloutfleet.worker_config import WorkerConfig

pytestmark = pytest.mark.integration


def config(url: str, index: int = 1, **redis: object) -> WorkerConfig:
    job = RolloutJob.from_dict({"metadata": {"name": "cartpole", "namespace": "team"},
                                "spec": {"replicas": 2, "env": {"id": "CartPole-v1"}, "redis": redis}})  # fmt: skip
    return WorkerConfig(job=job, worker_index=index, num_workers=2, redis_url=url)


def test_publish_poll_weights_and_heartbeat(redis_url: str) -> None:
    transport = WorkerTransport(config(redis_url))
    assert transport.poll_weights() is None
    WeightPublisher(redis_url, "cartpole", "team").publish({"w": np.ones(2)})
    update = transport.poll_weights()
    assert update is not None and update.seq_no == 1
    transport.publish(SampleBatch({"obs": np.zeros((3, 4), np.float32)}), weights_seq_no=1)
    [message] = BatchConsumer(redis_url, "cartpole", "team").read(timeout=5)
    assert (message.metadata.worker_index, message.metadata.weights_seq_no, message.metadata.env_steps) == (1, 1, 3)
    transport.heartbeat({"num_env_steps_sampled_lifetime": 300, "env_steps_per_s": 1234.5,
                         "episode_return_mean": float("nan"), "weights_seq_no": 1})  # fmt: skip
    beats = read_heartbeats(redis_url, config(redis_url).job)
    assert beats[1]["env_steps"] == 300 and beats[1]["steps_per_s"] == 1234.5 and beats[1]["weights_seq_no"] == 1
    transport.close()


def test_a_full_stream_is_a_retryable_condition_for_the_worker(redis_url: str) -> None:
    transport = WorkerTransport(config(redis_url, maxLen=1, blockTimeoutSeconds=0.1))
    transport.publish(SampleBatch({"obs": np.zeros(1)}), 0)
    with pytest.raises(transport.retryable) as caught:
        transport.publish(SampleBatch({"obs": np.zeros(1)}), 0)
    assert isinstance(caught.value, BackpressureTimeout)


def test_read_heartbeats_is_empty_when_redis_is_away() -> None:
    assert read_heartbeats("redis://127.0.0.1:1/0", config("redis://127.0.0.1:1/0").job) == {}

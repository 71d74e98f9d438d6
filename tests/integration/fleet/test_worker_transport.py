"""The worker's Redis side (WorkerTransport), and the heartbeats it writes as the operator
and the local fleet read them (:mod:`rolloutfleet.transport.heartbeat`)."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import HEARTBEAT_TTL_S, read_heartbeats, write_heartbeat
from rolloutfleet.transport.publisher import BackpressureTimeout
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher

pytestmark = pytest.mark.integration


def polling(transport: WorkerTransport) -> WorkerTransport:
    """Read the weights version every call, as without announcements: these tests publish and
    load in one thread, where an announcement may still be on its way when the load comes
    (tests/integration/transport/test_weights_news.py tests the announcements)."""
    transport.news.recheck_s = 0.0
    return transport


def config(url: str, index: int = 1, **redis: object) -> WorkerConfig:
    job = RolloutJob.from_dict({"metadata": {"name": "cartpole", "namespace": "team"},
                                "spec": {"replicas": 2, "env": {"id": "CartPole-v1"}, "redis": redis}})  # fmt: skip
    return WorkerConfig(job=job, worker_index=index, num_workers=2, redis_url=url)


def test_publish_poll_weights_and_heartbeat(redis_url: str) -> None:
    transport = polling(WorkerTransport(config(redis_url)))
    assert transport.poll_weights() == {}
    WeightPublisher(redis_url, "cartpole", "team").publish({"w": np.ones(2)})
    updates = transport.poll_weights()
    assert updates.keys() == {"default"} and updates["default"].seq_no == 1
    transport.publish(SampleBatch({"obs": np.zeros((3, 4), np.float32), "weights_seq_no": np.ones(3, np.int64)}))
    [message] = BatchConsumer(redis_url, "cartpole", "team").read(timeout=5)
    assert (message.metadata.worker_index, message.metadata.weights_seq_no, message.metadata.env_steps) == (1, 1, 3)
    transport.heartbeat({"num_env_steps_sampled_lifetime": 300, "env_steps_per_s": 1234.5,
                         "episode_return_mean": float("nan"), "weights_seq_no": 1})  # fmt: skip
    beats = read_heartbeats(redis_url, config(redis_url).job)
    assert beats[1]["env_steps"] == 300 and beats[1]["steps_per_s"] == 1234.5 and beats[1]["weights_seq_no"] == 1
    transport.close()


def test_rows_sampled_before_a_weights_update_reach_the_learner_judged_row_by_row(redis_url: str) -> None:
    from rolloutfleet.fleet.runner_factory import build_model
    from rolloutfleet.sampling.env_runner import EnvRunner
    from tests.integration.fleet_helpers import small_job

    job = small_job("mixed", replicas=1)
    runner = EnvRunner(job)
    transport = polling(WorkerTransport(WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url)))
    weights = WeightPublisher(redis_url, job.name)
    state = {name: value.numpy() for name, value in build_model(job).state_dict().items()}
    sampled: list[tuple[int, np.ndarray]] = []  # (weights version in force, the rows' versions)
    # New weights before every fragment, as a fast learner publishes them: rows the grid
    # carries over from one fragment to the next are then one version behind.
    while len(sampled) < 40 and sum(len(set(v.tolist())) > 1 for _, v in sampled) < 2:
        seq_no = weights.publish(state)
        assert transport.load_weights(runner) == seq_no
        batch = runner.sample()
        sampled.append((seq_no, batch["weights_seq_no"].copy()))
        transport.publish(batch)
    assert sum(len(set(v.tolist())) > 1 for _, v in sampled) == 2, "no fragment mixed two weights versions"
    consumer = BatchConsumer(redis_url, job.name, max_policy_lag=0, block_s=0.05)
    for seq_no, versions in sampled:
        consumer.policy_version = seq_no  # the learner's version when this fragment arrives
        [message] = consumer.read(count=1, timeout=5)
        assert (message.metadata.weights_seq_no_min, message.metadata.weights_seq_no) == (versions.min(), seq_no)
        assert message.batch["weights_seq_no"].tolist() == [seq_no] * int((versions == seq_no).sum())
        message.ack()
    carried = sum(int((versions < seq_no).sum()) for seq_no, versions in sampled)
    assert carried > 0 and consumer.stats.stale_rows == carried and consumer.stats.stale == 0
    transport.close()
    runner.close()


def test_a_full_stream_is_a_retryable_condition_for_the_worker(redis_url: str) -> None:
    transport = WorkerTransport(config(redis_url, maxLen=1, blockTimeoutSeconds=0.1))
    transport.publish(SampleBatch({"obs": np.zeros(1)}))
    with pytest.raises(transport.retryable) as caught:
        transport.publish(SampleBatch({"obs": np.zeros(1)}))
    assert isinstance(caught.value, BackpressureTimeout)


def test_heartbeats_of_several_workers_round_trip_and_expire_together(redis_url: str) -> None:
    job = config(redis_url).job
    client = redis.Redis.from_url(redis_url)
    keys = job_keys(job.namespace, job.name)
    write_heartbeat(client, keys, 0, {"num_env_steps_sampled_lifetime": 100, "env_steps_per_s": 50.0}, now=10.0)
    write_heartbeat(client, keys, 1, {"num_env_steps_sampled_lifetime": 7, "weights_seq_no": 3}, now=11.0)
    write_heartbeat(client, keys, 0, {"num_env_steps_sampled_lifetime": 150, "env_steps_per_s": 60.0}, now=12.0)
    beats = read_heartbeats(redis_url, job)
    assert sorted(beats) == [0, 1]  # one entry per worker: the last one it wrote
    assert (beats[0]["env_steps"], beats[0]["steps_per_s"], beats[0]["time"]) == (150.0, 60.0, 12.0)
    assert (beats[1]["env_steps"], beats[1]["weights_seq_no"], beats[1]["time"]) == (7.0, 3.0, 11.0)
    assert 0 < client.ttl(keys.heartbeats) <= HEARTBEAT_TTL_S
    client.hset(keys.heartbeats, "2", "written by something else")
    assert sorted(read_heartbeats(redis_url, job)) == [0, 1]


def test_read_heartbeats_is_empty_when_redis_is_away() -> None:
    assert read_heartbeats("redis://127.0.0.1:1/0", config("redis://127.0.0.1:1/0").job) == {}


def test_the_runner_is_the_record_of_the_loaded_version(redis_url: str) -> None:
    transport = polling(WorkerTransport(config(redis_url)))
    publisher = WeightPublisher(redis_url, "cartpole", "team")
    publisher.publish({"w": np.ones(2)})
    publisher.publish({"w": np.full(2, 2.0)})
    # A runner restored (set_state) with version 2 already: nothing newer to download.
    assert transport.poll_weights(held={"default": 2}) == {}
    # A runner that holds version 1 (the subscriber has not seen any): version 2 is newer.
    updates = transport.poll_weights(held={"default": 1})
    assert updates["default"].seq_no == 2 and updates["default"].weights["w"].tolist() == [2.0, 2.0]


def test_a_throttled_heartbeat_writes_changes_at_once_and_its_last_numbers_on_flush(redis_url: str) -> None:
    transport = WorkerTransport(config(redis_url))
    job = config(redis_url).job

    def written() -> float:
        return float(read_heartbeats(redis_url, job)[1]["env_steps"])

    transport.heartbeat({"num_env_steps_sampled_lifetime": 100}, every_s=60)
    for steps in (200, 300):  # within the minute, nothing else to say: held back
        transport.heartbeat({"num_env_steps_sampled_lifetime": steps}, every_s=60)
    assert written() == 100
    transport.weights.refuse(3, "does not fit")  # something to say besides the numbers: at once
    transport.heartbeat({"num_env_steps_sampled_lifetime": 400}, every_s=60)
    beat = read_heartbeats(redis_url, job)[1]
    assert beat["env_steps"] == 400 and beat["weights_refused"] == {"default": (3, "does not fit")}
    transport.heartbeat({"num_env_steps_sampled_lifetime": 500}, every_s=60)
    assert written() == 400
    transport.flush_heartbeat(every_s=60)  # a worker idle within the minute: still held back
    assert written() == 400
    transport.flush_heartbeat()
    assert written() == 500
    transport.flush_heartbeat()  # nothing held back: no write
    transport.heartbeat({"num_env_steps_sampled_lifetime": 600})  # unthrottled: written
    assert written() == 600
    transport.close()

"""The learner's global step through Redis: set by GlobalStepPublisher, taken by a worker's
WorkerTransport between fragments, and what a scheduled ε then is in the rows."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from rolloutfleet.data.codec import DecodeError
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.global_step import GlobalStepPublisher, parse_global_step
from rolloutfleet.transport.redis.keys import job_keys

pytestmark = pytest.mark.integration


def job(exploration: dict[str, object]) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "dqn", "namespace": "team"}, "spec": {
        "env": {"id": "CartPole-v1", "numEnvs": 4}, "policy": {"hidden": [8], "exploration": exploration},
        "sampling": {"rolloutFragmentLength": 50}}})  # fmt: skip


def test_a_worker_samples_with_the_epsilon_of_the_published_global_step(redis_url: str) -> None:
    scheduled = job({"type": "epsilonGreedy", "schedule": {"initial": 1.0, "final": 0.1, "steps": 100}})
    runner = EnvRunner(scheduled)
    transport = WorkerTransport(WorkerConfig(job=scheduled, worker_index=0, num_workers=1, redis_url=redis_url))
    transport.load_weights(runner)  # nothing published yet: the schedule's start
    assert runner.global_step == 0 and np.all(runner.sample()["exploration_scale"] == 1.0)
    with GlobalStepPublisher(redis_url, scheduled) as learner:
        learner.set_global_step(50)
        transport.load_weights(runner)
        assert runner.global_step == 50
        assert np.isclose(runner.sample()["exploration_scale"], 0.55).sum() >= 150  # rows stepped after it
        learner.set_global_step(10**6)
        transport.load_weights(runner)
        assert runner.exploration_scales() == {"default": pytest.approx(0.1)}
        with pytest.raises(ValueError, match="global step must be an integer >= 0"):
            learner.set_global_step(-1)
    transport.close()


def test_jobs_without_a_schedule_never_read_the_key(redis_url: str) -> None:
    for exploration in ({}, {"type": "epsilonGreedy", "epsilon": 0.1}):
        config = WorkerConfig(job=job(exploration), worker_index=0, num_workers=1, redis_url=redis_url)
        transport = WorkerTransport(config)
        assert transport.global_step is None
        transport.close()


def test_a_global_step_key_that_is_not_a_step_is_logged_once_and_ignored(redis_url: str, caplog) -> None:  # type: ignore[no-untyped-def]
    scheduled = job({"type": "epsilonGreedy", "schedule": {"initial": 1.0, "final": 0.1, "steps": 100}})
    transport = WorkerTransport(WorkerConfig(job=scheduled, worker_index=0, num_workers=1, redis_url=redis_url))
    client = redis.Redis.from_url(redis_url)
    key = job_keys("team", "dqn").global_step
    reader = transport.global_step
    assert reader is not None
    for value in ("soon", "soon", "1000.0"):  # hand-written, or a float from a learner of another kind
        client.set(key, value)
        assert reader.poll() is None  # no crash (a worker would restart on it forever)
    assert reader.refused == 2 and reader.step is None
    assert caplog.text.count("global-step holds b'soon', expected a non-negative integer global step") == 1
    client.set(key, "40")
    assert reader.poll() == 40
    with GlobalStepPublisher(redis_url, "dqn", "team") as learner:
        learner.set_global_step(np.int64(70))  # numpy (and torch) integers are steps too
        assert reader.poll() == 70
        with pytest.raises(ValueError, match=r"global step must be an integer >= 0, got 1\.5"):
            learner.set_global_step(1.5)  # type: ignore[arg-type]
    with pytest.raises(DecodeError, match="expected a non-negative integer global step"):
        parse_global_step(b"-3", key)
    transport.close()

"""`rolloutfleet run`'s evaluation workers: real processes on a real redis-server."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import redis

from rolloutfleet.fleet.local_evaluators import LocalEvaluators
from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, RolloutJob
from rolloutfleet.transport.evaluation_results import read_results
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.evaluation_kit import lean_weights
from tests.integration.fleet_helpers import wait_until


def job(env_id: str = "CartPole-v1", **evaluation: Any) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "local-eval"}, "spec": {
        "replicas": 0, "env": {"id": env_id}, "evaluation": {"workers": 1, "episodes": 2, **evaluation}}})  # fmt: skip


def test_the_local_evaluation_worker_judges_the_published_version_and_stops_cleanly(redis_url: str) -> None:
    fleet = LocalFleet(job(), redis_url=redis_url, grace_seconds=30).start()
    evaluators = LocalEvaluators(fleet).start()
    try:
        env = gym.make("CartPole-v1")
        like = Policy(PolicySpec(), env.observation_space, env.action_space).get_weights()
        WeightPublisher(redis_url, "local-eval").publish(lean_weights(like))
        client = redis.Redis.from_url(redis_url)
        keys = job_keys("default", "local-eval")

        def judged() -> bool:
            evaluators.poll()
            return bool(read_results(client, keys))

        wait_until(judged, 120, "the local evaluation of version 1")
        (result,) = read_results(client, keys)
        assert (result["version"], result["episodes"], result["return_mean"]) == (1, 2, 500.0)
        assert evaluators.alive() == 1
    finally:
        codes = evaluators.stop()
        fleet.stop()
    assert codes == {0: 0}


def test_an_evaluation_worker_that_cannot_build_its_env_stays_down_with_its_reason(redis_url: str) -> None:
    fleet = LocalFleet(job("NoSuchEnv-v0"), redis_url=redis_url).start()
    evaluators = LocalEvaluators(fleet).start()
    try:
        process = evaluators.processes[0]
        assert process is not None and process.wait(timeout=120) == 3
        evaluators.poll()
        assert evaluators.processes[0] is None and not evaluators.retry_at  # not started again
        last = (fleet.log_dir / "evaluator-0.log").read_text().strip().splitlines()[-1]
        assert last.startswith("rolloutfleet worker: spec.env.id: ") and "NoSuchEnv" in last
    finally:
        evaluators.stop()
        fleet.stop()

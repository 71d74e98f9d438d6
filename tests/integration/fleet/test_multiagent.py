"""Multi-agent jobs through a real Redis: per-policy streams and weights, and the worker process."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.runner_factory import build_policy_models
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.declared_columns import read_declared
from rolloutfleet.transport.entries import schema_of
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.fleet_helpers import read_until

ROOT = Path(__file__).resolve().parents[3]


def tag_job(name: str = "tag", train: list[str] | None = None, **spec: Any) -> RolloutJob:
    manifest = RolloutJob.from_file(ROOT / "examples/multiagent.yaml").to_dict()
    manifest["metadata"] = {"name": name}
    manifest["spec"]["replicas"] = 1
    manifest["spec"]["env"]["numEnvs"] = 2
    manifest["spec"]["sampling"]["rolloutFragmentLength"] = 20
    manifest["spec"]["multiAgent"]["policiesToTrain"] = train
    manifest["spec"].update(spec)
    return RolloutJob.from_dict(manifest)


def transport(job: RolloutJob, redis_url: str) -> WorkerTransport:
    """A worker's transport that reads every policy's version each call, as without
    announcements (a load right after a publish in one thread may precede its announcement)."""
    made = WorkerTransport(WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url))
    made.news.recheck_s = 0.0
    return made


def test_each_trained_policy_goes_to_its_own_stream_and_round_trips(redis_url: str) -> None:
    job = tag_job(train=["red"])
    runner = MultiAgentEnvRunner(job)
    batch = runner.sample()
    worker = transport(job, redis_url)
    worker.publish(batch)
    client = redis.Redis.from_url(redis_url)
    keys = job_keys("default", "tag")
    assert client.xlen(job_keys("default", "tag", "red").batches) == 1
    assert not client.exists(job_keys("default", "tag", "blue").batches), "blue is not trained: not published"
    assert not client.exists(keys.batches)
    red = BatchConsumer(redis_url, "tag", policy="red", group="test")
    message = red.read(timeout=5)[0]
    assert message.metadata.policy == "red" and message.metadata.agent_ids == batch.agent_ids
    assert message.metadata.env_steps == batch.env_steps() == 40
    for name, column in batch["red"].items():
        np.testing.assert_array_equal(message.batch[name], column)
    # What the worker declared for red's stream is what a learner decodes (agent_id included).
    assert read_declared(client, job_keys("default", "tag", "red")) == schema_of(message.batch)
    assert "agent_id" in message.batch and not client.exists(job_keys("default", "tag", "blue").columns)
    got = red.get(min_steps=1, timeout=0.1)
    assert got is None  # nothing else was published
    worker.close()


def test_a_retried_publish_does_not_send_a_policy_twice(redis_url: str) -> None:
    job = tag_job()
    batch = MultiAgentEnvRunner(job).sample()
    worker = transport(job, redis_url)
    blue = worker.publishers["blue"]
    sent = blue.publish

    def fail_once(*args: Any, **kwargs: Any) -> str:
        blue.publish = sent  # type: ignore[method-assign]
        raise redis.ConnectionError("Redis went away half-way")

    blue.publish = fail_once  # type: ignore[method-assign]
    with pytest.raises(redis.ConnectionError):
        worker.publish(batch)  # red went out, blue did not
    worker.publish(batch)  # the worker's retry: same batch object
    client = redis.Redis.from_url(redis_url)
    for policy in ("red", "blue"):
        assert client.xlen(job_keys("default", "tag", policy).batches) == 1


def test_only_a_failed_publish_is_a_retry(redis_url: str) -> None:
    # Once every part went out, the next call is a new batch, even one at the same address:
    # the worker drops each published batch, and the next one often gets the freed id().
    job = tag_job()
    batch = MultiAgentEnvRunner(job).sample()
    worker = transport(job, redis_url)
    client = redis.Redis.from_url(redis_url)
    for count in (1, 2):
        worker.publish(batch)
        assert client.xlen(job_keys("default", "tag", "red").batches) == count


def test_weights_per_policy_have_independent_versions(redis_url: str) -> None:
    job = tag_job()
    models = build_policy_models(job)
    red_weights = {k: np.full_like(v.numpy(), 0.5) for k, v in models["red"].state_dict().items()}
    red = WeightPublisher(redis_url, "tag", policy="red")
    assert red.publish(models["red"]) == 1
    assert red.publish(red_weights) == 2
    assert WeightPublisher(redis_url, "tag", policy="blue").publish(models["blue"]) == 1
    runner = MultiAgentEnvRunner(job)
    worker = transport(job, redis_url)
    assert worker.load_weights(runner) == 2
    assert runner.weights_seq_nos == {"red": 2, "blue": 1}
    np.testing.assert_array_equal(runner.get_weights(["red"])["red"]["pi.weight"], red_weights["pi.weight"])
    assert worker.load_weights(runner) is None, "nothing newer"
    WeightPublisher(redis_url, "tag", policy="blue").publish(models["blue"])
    assert worker.load_weights(runner) == 2 and runner.weights_seq_nos == {"red": 2, "blue": 2}
    batch = runner.sample()
    worker.publish(batch)
    message = BatchConsumer(redis_url, "tag", policy="red", group="t").read(timeout=5)[0]
    assert message.metadata.weights_seq_no == 2 and set(message.batch["weights_seq_no"].tolist()) == {2}


def test_the_worker_process_runs_a_multi_agent_job(redis_url: str, tmp_path: Path) -> None:
    job = tag_job("tagw")
    # Episodes cut at 5 env steps (team tag's own end comes at 50, or when blue is caught).
    bounded = job.spec.multi_agent.model_copy(update={"max_episode_steps": 5})  # type: ignore[union-attr]
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"multi_agent": bounded})})
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=free_port())
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ, stderr=subprocess.PIPE, text=True
    )
    try:
        red = BatchConsumer(redis_url, "tagw", policy="red", group="test")
        blue = BatchConsumer(redis_url, "tagw", policy="blue", group="test")
        first_red = read_until(red, lambda ms: len(ms) >= 1, timeout=90)[0]
        assert set(first_red.batch["agent_id"].tolist()) == {"red_0", "red_1"}
        # New blue weights reach the worker; red's version stays where it was.
        zeros = {k: np.zeros_like(v.numpy()) for k, v in build_policy_models(job)["blue"].state_dict().items()}
        seq_no = WeightPublisher(redis_url, "tagw", policy="blue").publish(zeros)
        later = read_until(blue, lambda ms: any(m.metadata.weights_seq_no == seq_no for m in ms), timeout=60)
        newest = next(m for m in later if m.metadata.weights_seq_no == seq_no)
        assert (newest.batch["vf_preds"][newest.batch["weights_seq_no"] == seq_no] == 0).all()
        assert all(m.metadata.weights_seq_no == 0 for m in red.read(timeout=10))
        beats = redis.Redis.from_url(redis_url).hgetall(job_keys("default", "tagw").heartbeats)
        assert b"0" in beats
        with urllib.request.urlopen(f"http://127.0.0.1:{config.metrics_port}/metrics", timeout=5) as response:
            families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
        cut = families["rolloutfleet_episodes_truncated_by_max_steps"].samples[0].value
        assert 0 < cut <= families["rolloutfleet_episodes"].samples[0].value
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr


def test_mean_std_filters_are_shared_per_policy(redis_url: str) -> None:
    from rolloutfleet.transport.filter_sync import read_filter

    manifest = tag_job().to_dict()
    manifest["spec"]["sampling"]["observationFilter"] = "meanStd"
    job = RolloutJob.from_dict(manifest)
    runners = [MultiAgentEnvRunner(job, worker_index=i, num_workers=2) for i in range(2)]
    workers = [
        WorkerTransport(WorkerConfig(job=job, worker_index=i, num_workers=2, redis_url=redis_url)) for i in range(2)
    ]
    observed = dict.fromkeys(runners[0].filters, 0)
    for _ in range(2):
        for runner, worker in zip(runners, workers, strict=True):
            runner.sample()
            for policy_id, filt in runner.filters.items():
                observed[policy_id] += int(filt.buffer.count)
            worker.sync_filters(runner)
    for policy_id, count in observed.items():
        fleet = read_filter(redis_url, job, policy=policy_id)
        assert fleet is not None and fleet.stats.count == count > 0
        assert runners[-1].filters[policy_id].stats.count == count
    assert read_filter(redis_url, job) is None  # no job-wide filter: one per policy
    for worker in workers:
        worker.close()


def test_a_bad_version_is_refused_per_policy(redis_url: str) -> None:
    """One policy's bad version leaves the other policy's good one loading, and is refused once."""
    from rolloutfleet.data.weights_check import WeightsRefused
    from rolloutfleet.transport.heartbeat import read_heartbeats

    job = tag_job("tag-refused")
    runner = MultiAgentEnvRunner(job)
    worker = transport(job, redis_url)
    worker.record_models(runner)
    models = build_policy_models(job)
    red = {k: v.numpy().copy() for k, v in models["red"].state_dict().items()}
    red["vf.bias"][:] = np.nan
    with pytest.raises(WeightsRefused, match=r"'vf\.bias' holds 1 NaN/inf values"):
        WeightPublisher(redis_url, "tag-refused", policy="red").publish(red)  # checked where it is made
    assert WeightPublisher(redis_url, "tag-refused", policy="red", validate=False).publish(red) == 1
    assert WeightPublisher(redis_url, "tag-refused", policy="blue").publish(models["blue"]) == 1
    assert worker.load_weights(runner) == 1
    assert runner.weights_seq_nos == {"red": 0, "blue": 1}
    assert worker.refused_weights() == {"red": (1, "'vf.bias' holds 1 NaN/inf values")}
    assert worker.load_weights(runner) is None  # not downloaded, not refused again
    assert (worker.subscribers["red"].refusals, worker.subscribers["blue"].refusals) == (1, 0)
    worker.heartbeat(runner.get_metrics())
    beat = read_heartbeats(redis_url, job)[0]
    assert beat["weights_refused"] == {"red": (1, "'vf.bias' holds 1 NaN/inf values")}
    worker.close()

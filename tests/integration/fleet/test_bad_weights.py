"""A bad weights version meets real workers and a real redis-server.

Defect reproduced first: a version with a wrong shape made every worker raise ValueError
on load and exit 1, restart, load it again...; a NaN version was loaded silently (action
always 0, ``action_logp`` NaN). Now a worker refuses such a version once, keeps sampling
with the weights it holds, and says so (log, metric, heartbeat, ``rolloutfleet streams``);
a learner's ``WeightPublisher`` refuses to publish it in the first place.
"""

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

from rolloutfleet.data.weights_check import WeightsRefused
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import read_heartbeats
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.fleet_helpers import read_until, small_job, wait_until

pytestmark = pytest.mark.integration

JOB = "badweights"


def good_weights() -> dict[str, np.ndarray]:
    from rolloutfleet.fleet.runner_factory import build_model

    return {k: np.zeros_like(v.numpy()) for k, v in build_model(small_job(JOB, replicas=1)).state_dict().items()}


def start(redis_url: str, port: int, stderr: Any) -> subprocess.Popen[str]:
    config = WorkerConfig(
        job=small_job(JOB, replicas=1), worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=port
    )
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "--log-level=WARNING", "worker"],
        env={**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": os.devnull},
        stderr=stderr,
        text=True,
    )


def refused(redis_url: str) -> dict[str, Any]:
    beat = read_heartbeats(redis_url, small_job(JOB, replicas=1)).get(0, {})
    return dict(beat.get("weights_refused") or {})


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_worker_refuses_bad_versions_once_and_keeps_sampling(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "worker.stderr"
    good = good_weights()
    unchecked = WeightPublisher(redis_url, JOB, validate=False)  # a learner that skips the check
    with log.open("w") as stderr:
        worker = start(redis_url, port, stderr)
    try:
        consumer = BatchConsumer(redis_url, JOB, group="test")
        read_until(consumer, lambda ms: len(ms) >= 1, timeout=90)
        # 1. A wrong shape: refused, the worker keeps version 0 and keeps publishing.
        wrong = {**good, "pi.weight": np.zeros((3, good["pi.weight"].shape[1]), np.float32)}
        assert unchecked.publish(wrong) == 1
        wait_until(lambda: refused(redis_url).get("default", (0,))[0] == 1, 60, "v1 reported refused")
        after = read_until(consumer, lambda ms: len(ms) >= 5, timeout=60)
        assert worker.poll() is None, log.read_text()
        assert all(set(m.batch["weights_seq_no"].tolist()) == {0} for m in after)
        assert "'pi.weight' has shape (3, 64), expected (2, 64)" in refused(redis_url)["default"][1]
        # 2. NaN values: refused too, not loaded silently.
        nan = {**good, "pi.weight": np.full_like(good["pi.weight"], np.nan)}
        assert unchecked.publish(nan) == 2
        wait_until(lambda: refused(redis_url).get("default", (0,))[0] == 2, 60, "v2 reported refused")
        after = read_until(consumer, lambda ms: len(ms) >= 5, timeout=60)
        assert all(np.isfinite(m.batch["action_logp"]).all() for m in after)
        assert all(set(m.batch["weights_seq_no"].tolist()) == {0} for m in after)
        streams = subprocess.run(
            [sys.executable, "-m", "rolloutfleet.cli.main", "streams", "--redis", redis_url],
            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"},
        )  # fmt: skip
        assert (
            f"default/{JOB}: weights v2 refused by 1 worker: 'pi.weight' holds 128 NaN/inf values" in streams.stdout
        ), streams
        # Each version refused once: one log line each, counted once, however many polls since.
        lines = [line for line in log.read_text().splitlines() if "refused, keeping the weights held" in line]
        assert len(lines) == 2 and "weights v1" in lines[0] and "weights v2" in lines[1], lines
        assert metric(port, "rolloutfleet_weights_refused_total") == 2
        # 3. A good version after them is loaded, and the refusal is no longer reported.
        assert unchecked.publish(good) == 3
        read_until(consumer, lambda ms: any(3 in m.batch["weights_seq_no"] for m in ms), timeout=60)
        wait_until(lambda: not refused(redis_url), 30, "the refusal cleared")
        worker.terminate()
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def test_the_publisher_refuses_what_the_workers_would(redis_url: str, tmp_path: Path) -> None:
    """Caught where the mistake is made: against the model the workers recorded."""
    port = free_port()
    good = good_weights()
    with (tmp_path / "stderr").open("w") as stderr:
        worker = start(redis_url, port, stderr)
    try:
        keys = job_keys("default", JOB)
        client = redis.Redis.from_url(redis_url)
        wait_until(lambda: client.exists(keys.weights_model) == 1, 90, "the workers recorded their model")
        publisher = WeightPublisher(redis_url, JOB)
        before = client.get(keys.weights_version)
        with pytest.raises(WeightsRefused, match=r"missing \['vf\.bias'\]"):
            publisher.publish({k: v for k, v in good.items() if k != "vf.bias"})
        with pytest.raises(WeightsRefused, match=r"'pi\.weight' has dtype int64, expected float32"):
            publisher.publish({**good, "pi.weight": good["pi.weight"].astype(np.int64)})
        with pytest.raises(WeightsRefused, match=r"'vf\.bias' holds 1 NaN/inf values"):
            publisher.publish({**good, "vf.bias": np.array([np.inf], np.float32)})
        assert client.get(keys.weights_version) == before  # nothing was published
        seq = publisher.publish({k: v.astype(np.float64) for k, v in good.items()})  # float64 fits a float32 model
        assert client.get(keys.weights_version).split()[0] == str(seq).encode()  # type: ignore[union-attr]
        worker.terminate()
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def test_without_a_recorded_model_the_publisher_still_refuses_nan(redis_url: str) -> None:
    publisher = WeightPublisher(redis_url, "nomodel")
    with pytest.raises(WeightsRefused, match="holds 2 NaN/inf values"):
        publisher.publish({"w": np.array([1.0, np.nan, -np.inf], np.float32)})
    assert publisher.publish({"w": np.ones(3, np.float32)}) == 1

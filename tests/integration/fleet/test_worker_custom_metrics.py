"""Custom per-episode metrics set by a job's callbacks reach the worker's ``/metrics``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob

pytestmark = pytest.mark.integration


def custom_series(port: int) -> dict[tuple[str, str], float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        (sample.labels["metric"], sample.labels["stat"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "rolloutfleet_custom_metric"
        for sample in family.samples
    }


def test_a_callbacks_custom_metrics_reach_the_workers_metrics(redis_url: str, tmp_path: Path) -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "custom"}, "spec": {
        "env": {"id": "CartPole-v1", "numEnvs": 2},
        "sampling": {"rolloutFragmentLength": 100, "seed": 0,
                     "callbacks": "tests.integration.fleet.custom_callbacks:ReturnCheck"},
        "redis": {"maxLen": 50, "backpressure": "dropOldest"}}})  # fmt: skip
    port = free_port()
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=port)
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "term")}
    worker = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (series := custom_series(port)):
            assert worker.poll() is None and time.monotonic() < deadline, "no custom metric on /metrics"
            time.sleep(0.3)
    finally:
        worker.terminate()
        worker.wait(30)
    assert series[("return_gap", "mean")] == 0.0  # the runner's return is the sum of the rewards the callback saw
    assert series[("steps", "min")] >= 1 and series[("steps", "max")] <= 500
    assert ("reward_sum", "mean") not in series  # popped before the episode ended

"""The timing breakdown per vector step reaches a real worker's ``/metrics``: all four phases."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.fleet.embedded_redis import free_port
from tests.integration.fleet.test_worker import start_worker

pytestmark = pytest.mark.integration


def phases(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        sample.labels["phase"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "rolloutfleet_vector_step_seconds"
        for sample in family.samples
    }


def test_every_phase_of_a_vector_step_is_on_metrics(redis_url: str, tmp_path: Path) -> None:
    spec = {"env": {"id": "CartPole-v1", "numEnvs": 4}, "sampling": {"rolloutFragmentLength": 50},
            "redis": {"maxLen": 50, "backpressure": "dropOldest"}}  # fmt: skip
    port = free_port()
    worker = start_worker(redis_url, port, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(spec))
    try:
        deadline = time.monotonic() + 120
        while len(served := phases(port)) < 4:
            assert worker.poll() is None and time.monotonic() < deadline, f"phases on /metrics: {served}"
            time.sleep(0.3)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    assert set(served) == {"inference", "env_wait", "recording", "publish"}
    assert all(value > 0 for value in served.values()), served

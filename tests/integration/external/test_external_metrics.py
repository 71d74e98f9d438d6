"""An external env's worker serves its action server's counters on /metrics: a real worker
process, a real redis-server, a PolicyClient making a known number of calls, good and bad;
the series count exactly those calls."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.client import PolicyClient, PolicyClientError
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from tests.integration.external.test_external_worker import external_job, stop
from tests.integration.fleet_helpers import wait_until

pytestmark = pytest.mark.integration


def start_serving_worker(job: RolloutJob, redis_url: str, tmp_path: Path) -> tuple[subprocess.Popen[str], str, int]:
    """A worker of ``job`` with its /metrics on: (process, simulators' address, metrics port)."""
    port, metrics_port = free_port(), free_port()
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=metrics_port)
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_EXTERNAL_PORT": str(port),
               "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination")}  # fmt: skip
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ,
                                  stderr=log, text=True)  # fmt: skip
    address = f"127.0.0.1:{port}"

    def serving() -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        try:
            PolicyClient(address).info()
            return True
        except OSError:
            return False

    wait_until(serving, 120, "the worker serving actions")
    return worker, address, metrics_port


def scrape_samples(port: int) -> dict[str, float]:
    """``rolloutfleet_external_*`` sample name -> value (one worker: one series each)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("rolloutfleet_external_") and not sample.name.endswith("_created")
    }


def play(client: PolicyClient, steps: int) -> None:
    """One whole episode of ``steps`` actions (CartPole-shaped observations)."""
    episode = client.start_episode()
    obs = [0.01, 0.0, 0.0, 0.0]
    for _ in range(steps):
        client.get_action(episode, obs)
        client.log_returns(episode, 1.0)
    client.end_episode(episode, obs, truncated=False)


def test_the_action_servers_counters_are_on_metrics(redis_url: str, tmp_path: Path) -> None:
    job = external_job(fragment=4, port=9900, maxClients=2)
    worker, address, metrics_port = start_serving_worker(job, redis_url, tmp_path)
    try:
        first, second = PolicyClient(address), PolicyClient(address)
        episode = first.start_episode()
        with pytest.raises(PolicyClientError, match="expected shape"):
            first.get_action(episode, [0.0, 0.0])  # bad input: the episode is dropped, the call refused
        with pytest.raises(PolicyClientError, match="unknown episode id 42"):
            first.get_action("42", [0.0] * 4)
        second.start_episode()  # left open
        with pytest.raises(PolicyClientError, match="server full"):
            PolicyClient(address).start_episode()
        play(first, 12)  # 12 rows: three fragments, so the worker reports after the calls above
        # One client calling one at a time: every forward pass serves exactly one action.
        expected = {
            "rolloutfleet_external_clients": 2,
            "rolloutfleet_external_open_episodes": 1,
            "rolloutfleet_external_actions_total": 12,
            "rolloutfleet_external_inference_passes_total": 12,
            "rolloutfleet_external_episodes_dropped_total": 1,
            "rolloutfleet_external_calls_refused_total": 2,
            "rolloutfleet_external_clients_refused_total": 1,
            "rolloutfleet_external_episodes_timed_out_total": 0,
            "rolloutfleet_external_backpressure_waits_total": 0,
        }
        seen: list[dict[str, float]] = [{}]

        def counted() -> bool:
            seen[0] = scrape_samples(metrics_port)
            return seen[0] == expected

        try:
            wait_until(counted, 60, "/metrics counting the calls")
        except AssertionError:
            assert seen[0] == expected  # says which series differ
        assert stop(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()

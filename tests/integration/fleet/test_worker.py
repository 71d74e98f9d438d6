"""``rolloutfleet worker`` as a pod runs it: env vars in, batches and probes out."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.inference.device import driver_device_count, usable_cuda_devices
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.fleet_helpers import read_until, small_job
from tests.integration.redis_server import RedisServer


def start_worker(
    redis_url: str,
    port: int,
    tmp_path: Path,
    stderr: Any = subprocess.PIPE,
    log_level: str = "WARNING",
    job: RolloutJob | None = None,
    **env: str,
) -> subprocess.Popen[str]:
    job = small_job("w", replicas=1) if job is None else job
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=port)
    environ = {
        **os.environ,
        **config.to_environ(),
        "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination"),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", f"--log-level={log_level}", "worker"],
        env=environ,
        stderr=stderr,
        text=True,
    )


def probe(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def wait_probe(port: int, path: str, code: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe(port, path) == code:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never answered {code}")


def test_worker_publishes_loads_weights_and_drains_on_sigterm(redis_url: str, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "worker.stderr"
    with log.open("w") as stderr:
        worker = start_worker(redis_url, port, tmp_path, stderr=stderr, log_level="INFO")
    try:
        consumer = BatchConsumer(redis_url, "w", group="test")
        first = read_until(consumer, lambda ms: len(ms) >= 1, timeout=90)[0]
        assert first.metadata.worker_index == 0 and len(first.batch) == 100
        wait_probe(port, "/readyz", 200, 30)
        assert probe(port, "/healthz") == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            metrics = response.read().decode()
        assert 'rolloutfleet_batches_published_total{job_name="w"' in metrics
        # ``device: auto`` says where the default MLP went, in the log and a metric. Without a
        # usable GPU it acts in numpy on the CPU: no torch library is mapped into the worker.
        mapped = Path(f"/proc/{worker.pid}/maps").read_text()
        gpu = usable_cuda_devices() > 0
        assert ("libtorch" in mapped or "libc10" in mapped) == gpu
        where = [
            (sample.labels["policy"], sample.labels["requested"], sample.labels["device"], sample.labels["inference"])
            for family in text_string_to_metric_families(metrics)
            if family.name == "rolloutfleet_policy_device"
            for sample in family.samples
            if sample.value == 1
        ]
        assert where == [("default", "auto", "cuda", "torch") if gpu else ("default", "auto", "cpu", "numpy")], metrics
        assert gpu != ("no CUDA device is usable here: the policy runs on the CPU" in log.read_text())
        # New weights (every parameter zero: both actions equally likely) reach the worker.
        from rolloutfleet.fleet.runner_factory import build_model

        zeros = {k: np.zeros_like(v.numpy()) for k, v in build_model(small_job("w", replicas=1)).state_dict().items()}
        seq_no = WeightPublisher(redis_url, "w").publish(zeros)
        later = read_until(consumer, lambda ms: any(m.metadata.weights_seq_no == seq_no for m in ms), timeout=60)
        newest = next(m for m in later if m.metadata.weights_seq_no == seq_no)
        # Rows record the version that produced them: a few rows carried over from the
        # previous fragment still say 0; every row sampled with the new weights says so.
        rows = newest.batch["weights_seq_no"]
        assert set(rows.tolist()) <= {0, seq_no} and (rows == seq_no).mean() > 0.8
        assert newest.metadata.weights_seq_no_min == rows.min()  # written from the rows, not beside them
        np.testing.assert_allclose(newest.batch["action_logp"][rows == seq_no], np.log(0.5), rtol=1e-5)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def test_worker_waits_for_redis_instead_of_crash_looping(tmp_path: Path) -> None:
    redis = EmbeddedRedis()  # not started yet: the worker finds nothing on the port
    port = free_port()
    worker = start_worker(redis.url, port, tmp_path)
    try:
        wait_probe(port, "/readyz", 503, 60)
        time.sleep(2)
        assert worker.poll() is None and probe(port, "/healthz") == 200
        with redis:
            wait_probe(port, "/readyz", 200, 60)
            read_until(BatchConsumer(redis.url, "w", group="test"), lambda ms: len(ms) >= 1, timeout=60)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()


def test_a_worker_told_to_stop_during_a_redis_outage_exits_at_once(own_redis: RedisServer, tmp_path: Path) -> None:
    """Defect: the stop waited out the outage backoff (8 s and more) before dropping the fragment."""
    # A full stream (block, maxLen 1, no learner) holds the worker inside a publish, fragment
    # in hand, when Redis goes away: the case where the stop used to wait.
    spec = small_job("w", replicas=1).to_dict()["spec"]
    spec["redis"] = {"maxLen": 1, "backpressure": "block"}
    port = free_port()
    log = tmp_path / "worker.stderr"
    with log.open("w") as stderr:
        worker = start_worker(own_redis.url, port, tmp_path, stderr=stderr, ROLLOUTFLEET_SPEC=json.dumps(spec))
    try:
        client = own_redis.client()
        deadline = time.monotonic() + 90
        while client.xlen(job_keys("default", "w").batches) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        own_redis.stop()  # gone: connections are refused
        while "redis unavailable while publishing" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        code = worker.wait(60)
        took = time.monotonic() - stopped_at
        assert code == 0, log.read_text()
        assert took < 5, f"the stop took {took:.1f} s with Redis away"
        assert "dropping one unpublished fragment" in log.read_text()
    finally:
        worker.kill()


@pytest.mark.parametrize(
    ("spec_json", "field"),
    [
        ('{"env": {"entryPoint": "no_such_module_anywhere:make"}}', "spec.env.entryPoint"),
        ('{"env": {"id": "NoSuchEnv-v0"}}', "spec.env.id: Environment `NoSuchEnv` doesn't exist"),
        (
            '{"env": {"entryPoint": "tests.unit.sampling.poison_envs:make_failing_reset_at_build"}}',
            "licence server is unreachable",
        ),
        ('{"env": {"id": "CartPole-v1"}, "policy": {"device": "cuda:7"}}', "spec.policy.device"),
        pytest.param(
            '{"env": {"id": "CartPole-v1"}, "policy": {"device": "cuda"}}',
            "no CUDA device is available on this node",
            marks=pytest.mark.skipif(driver_device_count() > 0, reason="this machine has a CUDA device"),
        ),
    ],
)
def test_an_unbuildable_env_or_policy_exits_with_one_line(
    redis_url: str, tmp_path: Path, spec_json: str, field: str
) -> None:
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=spec_json)
    _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and field in lines[0], stderr
    assert field in (tmp_path / "termination").read_text()


@pytest.mark.parametrize(
    ("profile", "hint"),
    [
        ("worker-slim", "spec.image, or policy.inference: torch, selects the full worker image"),
        ("worker-cuda", "the worker image does not hold it"),
    ],
)
def test_a_policy_that_needs_torch_in_an_image_without_it_exits_with_one_line(
    redis_url: str, tmp_path: Path, profile: str, hint: str
) -> None:
    """The slim image's case, here without the image: ``torch`` made unimportable (``sys.modules``)."""
    config = WorkerConfig(job=small_job("w", 1), worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=0)
    environ = {
        **os.environ,
        **config.to_environ(),
        "ROLLOUTFLEET_SPEC": '{"env": {"id": "CartPole-v1"}, "policy": {"inference": "torch"}}',
        "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination"),
        "ROLLOUTFLEET_IMAGE_PROFILE": profile,
    }
    no_torch = "import sys; sys.modules['torch'] = None; from rolloutfleet.cli.main import main; sys.exit(main())"
    worker = subprocess.run(
        [sys.executable, "-c", no_torch, "--log-level=WARNING", "worker"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert worker.returncode == 3, worker.stderr
    assert "Traceback" not in worker.stderr
    lines = [line for line in worker.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rolloutfleet worker: missing Python module 'torch': "), lines
    assert hint in lines[0]
    assert (tmp_path / "termination").read_text() == lines[0].removeprefix("rolloutfleet worker: ") + "\n"


def test_nan_from_the_env_is_counted_in_metrics_and_heartbeat_not_in_the_filter(redis_url: str, tmp_path: Path) -> None:
    from rolloutfleet.data.batch import nonfinite_rows
    from rolloutfleet.transport.filter_sync import read_filter
    from rolloutfleet.transport.heartbeat import read_heartbeats

    spec = {
        "env": {"entryPoint": "tests.unit.sampling.poison_envs:make_nan_env", "numEnvs": 2,
                "config": {"nan_every": 5, "nan_reward": True}},
        "sampling": {"rolloutFragmentLength": 50, "observationFilter": "meanStd", "seed": 0},
        "redis": {"maxLen": 10000},
    }  # fmt: skip
    port = free_port()
    with (tmp_path / "stderr").open("w") as stderr:
        worker = start_worker(redis_url, port, tmp_path, stderr=stderr, ROLLOUTFLEET_SPEC=json.dumps(spec))
        try:
            consumer = BatchConsumer(redis_url, "w", group="test")
            seen = read_until(consumer, lambda ms: len(ms) >= 3, timeout=90)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                metrics = response.read().decode()
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
        finally:
            worker.kill()
    job = RolloutJob.from_dict({"metadata": {"name": "w"}, "spec": spec})
    # Every batch the worker published, once: through the group (entries it has consumed may
    # be trimmed already, so a reader of the stream could miss them).
    while messages := consumer.read(timeout=1.0):
        seen += messages
    published = [nonfinite_rows(m.batch) for m in seen]
    beat = read_heartbeats(redis_url, job)[0]
    # The heartbeat's lifetime counts are the published batches' own, row for row.
    assert beat["nonfinite_obs"] == sum(p[0] for p in published) > 0
    assert beat["nonfinite_rewards"] == sum(p[1] for p in published) > 0
    assert beat["filter_quarantined"] > 0
    assert "rolloutfleet_nonfinite_observation_rows_total" in metrics
    assert "env produced non-finite values" in (tmp_path / "stderr").read_text()
    fleet = read_filter(redis_url, job)
    assert fleet is not None and fleet.stats.is_finite() and fleet.stats.count > 0


FAILING_ENV = "tests.unit.sampling.poison_envs:make_failing_env"


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"fail": "step"}, "RuntimeError: physics blew up"),
        ({"fail": "reset"}, "ConnectionError: simulator at 10.0.0.9:7000 refused the connection"),
    ],
)
def test_an_env_that_keeps_failing_ends_the_worker_with_one_line(
    redis_url: str, tmp_path: Path, config: dict[str, str], error: str
) -> None:
    spec = {"env": {"entryPoint": FAILING_ENV, "numEnvs": 2, "config": config}}
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(spec))
    _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and FAILING_ENV in lines[0] and error in lines[0], stderr
    assert "Traceback" not in stderr
    # maxConsecutiveFailures 3 (the default): each of the 2 sub-envs recreated twice, then the end.
    assert stderr.count("recreating it") == (4 if config["fail"] == "step" else 0)
    termination = (tmp_path / "termination").read_text()
    assert FAILING_ENV in termination and error in termination
    assert redis_url and not BatchConsumer(redis_url, "w", group="test").read(timeout=0.5)  # nothing published


def test_sigterm_stops_a_worker_whose_env_keeps_failing(redis_url: str, tmp_path: Path) -> None:
    spec = {
        "env": {"entryPoint": FAILING_ENV, "numEnvs": 1, "maxConsecutiveFailures": 1000, "config": {"delay": 0.2}},
    }
    log_path = tmp_path / "stderr"
    with log_path.open("w") as stderr:
        worker = start_worker(redis_url, 0, tmp_path, stderr=stderr, ROLLOUTFLEET_SPEC=json.dumps(spec))
        try:
            deadline = time.monotonic() + 90
            while "recreating it" not in log_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "recreating it" in log_path.read_text()
            worker.send_signal(signal.SIGTERM)
            # 1000 failures of 0.2 s each would take minutes: the stop ends it at the next one.
            assert worker.wait(30) == 0
        finally:
            worker.kill()
    assert "the fragment being sampled is dropped" in log_path.read_text()


def test_a_fragment_above_the_payload_cap_is_refused_before_sampling(redis_url: str, tmp_path: Path) -> None:
    """It used to be found only after sampling it: exit 1 and a restart loop."""
    spec = {"env": {"id": "CartPole-v1", "numEnvs": 64}, "sampling": {"rolloutFragmentLength": 20000}}
    worker = start_worker(redis_url, 0, tmp_path, ROLLOUTFLEET_SPEC=json.dumps(spec))
    _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and "spec.sampling.rolloutFragmentLength" in lines[0] and "32.0 MiB" in lines[0]
    assert "spec.sampling.rolloutFragmentLength" in (tmp_path / "termination").read_text()


def test_a_taken_probe_port_exits_with_one_line(redis_url: str, tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        worker = start_worker(redis_url, port, tmp_path, ROLLOUTFLEET_SPEC='{"env": {"id": "CartPole-v1"}}')
        _, stderr = worker.communicate(timeout=90)
    assert worker.returncode == 3, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert lines == [f"rolloutfleet worker: probes and metrics port {port}: Address already in use"], stderr
    assert "Traceback" not in stderr

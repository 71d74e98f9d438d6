"""Bad addresses and bad arguments, as a user meets them: the real CLI in a subprocess, a real
redis-server (or nothing listening). Each ends in one line on stderr and a non-zero exit.

Defects reproduced first: ``run --redis redis://127.0.0.1:1/0`` never failed (its workers
retried for ever, a wrong password too); ``streams`` with an ``http://`` URL printed a
traceback; ``sample --steps 0`` wrote an empty file and exited 0; unwritable ``--output``
paths gave tracebacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from tests.integration.fleet_helpers import small_job
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = str(ROOT / "examples" / "cartpole.yaml")
PASSWORD = "s3cret-pw"


def cli(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ROLLOUTFLEET_REDIS_PASSWORD"}
    return subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**environ, **env}, check=False,
    )  # fmt: skip


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr of a command that failed."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, (result.returncode, result.stderr)
    return lines[0]


def commands(url: str, tmp_path: Path, timeout: str) -> dict[str, list[str]]:
    return {
        "run": ["run", MANIFEST, "--redis", url, "--redis-timeout", timeout, "--no-status", "--duration", "1"],
        "streams": ["streams", "--redis", url, "--timeout", timeout],
        "consume": ["consume", "--redis", url, "--job", "x", "--count", "1", "--output", str(tmp_path / "x.npz"),
                    "--timeout", timeout],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["run", "streams", "consume"])
def test_nothing_listening_is_retried_for_the_bound_then_one_line(command: str, tmp_path: Path) -> None:
    port = free_port()
    result = cli(*commands(f"redis://127.0.0.1:{port}/0", tmp_path, "1")[command])
    assert one_line(result) == f"rolloutfleet {command}: redis at 127.0.0.1:{port}: connection refused (tried for 1 s)"
    assert result.returncode == 1


def test_a_redis_that_comes_up_within_the_bound_is_used(tmp_path: Path) -> None:
    server = EmbeddedRedis()  # not started: connections are refused at first
    starter = threading.Timer(1.0, server.start)
    starter.start()
    try:
        result = cli("streams", "--redis", server.url, "--timeout", "60")
        assert result.returncode == 0, result.stderr
        assert "0 job streams" in result.stdout
    finally:
        starter.join()
        server.stop()


@pytest.fixture
def locked_redis(own_redis: RedisServer) -> RedisServer:
    own_redis.client().config_set("requirepass", PASSWORD)
    return own_redis


@pytest.mark.parametrize("command", ["run", "streams", "consume"])
def test_a_wrong_or_missing_password_is_not_retried(command: str, locked_redis: RedisServer, tmp_path: Path) -> None:
    # A bound of 600 s: were authentication errors retried, the command would outlive the test's limit.
    argv = commands(locked_redis.url, tmp_path, "600")[command]
    wrong = one_line(cli(*argv, timeout=60, ROLLOUTFLEET_REDIS_PASSWORD="wrong"))
    where = f"redis at 127.0.0.1:{locked_redis.port}"
    assert wrong.startswith(f"rolloutfleet {command}: {where}: authentication failed"), wrong
    assert "$ROLLOUTFLEET_REDIS_PASSWORD" in wrong and "wrong" not in wrong.split("authentication failed")[0]
    missing = one_line(cli(*argv, timeout=60))
    assert missing.startswith(f"rolloutfleet {command}: {where}: a password is required"), missing


@pytest.mark.parametrize("command", ["run", "streams", "consume"])
def test_a_url_that_is_not_a_redis_url_is_one_line_without_the_password(command: str, tmp_path: Path) -> None:
    result = cli(*commands("http://admin:hunter2@127.0.0.1:6379/0", tmp_path, "1")[command])
    line = one_line(result)
    assert result.returncode == 2
    assert "'http://127.0.0.1:6379/0' is not a Redis URL: it must start with redis://, rediss:// or unix://" in line
    assert "hunter2" not in result.stderr + result.stdout


def start_worker(url: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    config = WorkerConfig(job=small_job("addr", replicas=1), worker_index=0, num_workers=1, redis_url=url,
                          metrics_port=0)  # fmt: skip
    environ = {k: v for k, v in os.environ.items() if k != "ROLLOUTFLEET_REDIS_PASSWORD"}
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "worker"],
        env={**environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination"), **env},
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def worker_line(worker: subprocess.Popen[str]) -> str:
    _, stderr = worker.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.startswith("rolloutfleet worker:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_worker_given_a_startup_bound_gives_up_with_one_line(tmp_path: Path) -> None:
    """Without the bound (the operator's pods) a worker waits, unready: test_worker.py's
    test_worker_waits_for_redis_instead_of_crash_looping."""
    port = free_port()
    worker = start_worker(f"redis://127.0.0.1:{port}/0", tmp_path, ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS="2")
    line = worker_line(worker)
    assert worker.returncode == 4
    assert line == f"rolloutfleet worker: redis at 127.0.0.1:{port}: connection refused (tried for 2 s)"
    assert (tmp_path / "termination").read_text().strip() == line.removeprefix("rolloutfleet worker: ")


def test_a_worker_refused_by_the_password_exits_without_retrying(locked_redis: RedisServer, tmp_path: Path) -> None:
    worker = start_worker(locked_redis.url, tmp_path, ROLLOUTFLEET_REDIS_PASSWORD="wrong")  # and no bound
    line = worker_line(worker)
    assert worker.returncode == 4
    assert f"redis at 127.0.0.1:{locked_redis.port}: authentication failed" in line, line
    assert "wrong" not in line.split("authentication failed")[0]


def test_bad_arguments_of_every_command_are_one_line(redis_url: str, tmp_path: Path) -> None:
    out = str(tmp_path / "out.npz")
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    cases = [
        (["sample", MANIFEST, "--steps", "0", "--output", out], "--steps must be >= 1, got 0"),
        (["sample", MANIFEST, "--steps", "10", "--output", str(not_a_dir / "x.npz")], "is not a directory"),
        (["sample", MANIFEST, "--steps", "10", "--output", str(tmp_path)], "is a directory"),
        (["sample", MANIFEST, "--steps", "10", "--output", out, "--worker-index", "2", "--num-workers", "2"],
         "--worker-index must be within 0 and --num-workers - 1, got 2"),
        (["validate", str(tmp_path / "missing.yaml")], "cannot read manifest"),
        (["run", MANIFEST, "--redis", redis_url, "--redis-timeout", "0"], "--redis-timeout must be > 0 s"),
        (["run", str(tmp_path / "missing.yaml")], "cannot read manifest"),
        (["streams", "--redis", redis_url, "--timeout", "-1"], "--timeout must be > 0 s"),
        (["streams", "--redis", "redis://127.0.0.1:99999/0"], "its port is not a number"),
        (["consume", "--redis", redis_url, "--job", "x", "--count", "1", "--output", str(not_a_dir / "x.npz")],
         "is not a directory"),
        (["consume", "--redis", redis_url, "--job", "x", "--count", "0", "--output", out], "--count must be >= 1"),
    ]  # fmt: skip
    for argv, expected in cases:
        result = cli(*argv)
        assert expected in one_line(result), (argv, result.stderr)
        assert "Traceback" not in result.stderr
    assert not Path(out).exists(), "nothing written by a command that failed"
    bad_worker = start_worker(redis_url, tmp_path, ROLLOUTFLEET_WORKER_INDEX="seven")
    assert "ROLLOUTFLEET_WORKER_INDEX: must be an integer" in worker_line(bad_worker)
    assert bad_worker.returncode == 3

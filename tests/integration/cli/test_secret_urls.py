"""A Redis password with URL-special characters (``/ # ? @ % :`` and spaces) is read right, and
never shown: every error path a user can reach runs in a real subprocess, and its stdout and
stderr are searched for the password, its percent-encoded form and every piece of it.

Defects reproduced first: ``streams --redis redis://:a/b#c@host/0`` blamed the port and printed
``redis://:a/b``; the worker crashed with ``ValueError: Port could not be cast to integer value
as 'a'`` (a piece of the password) in a traceback; ``validate`` of a manifest whose URL held
``p: w`` printed the manifest's line; ``run`` printed the ``--redis`` URL whole.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import redis

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.fleet_helpers import small_job
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = str(ROOT / "examples" / "cartpole.yaml")
# Each piece (3 characters between the special ones) is searched for on its own, so a message
# holding part of a password (the worker's traceback held "a") is caught too.
PASSWORDS = ["Ax1/By2#Cz3?Dw4@Ev5:Fu6 Gt7", "@Hs8:/Jr9#", "Kq0 %Lp3%4Mn5"]


def pieces(password: str) -> list[str]:
    return [password, urllib.parse.quote(password, safe=""), *re.findall(r"[A-Za-z0-9]{3}", password)]


def assert_hidden(password: str, *outputs: str) -> None:
    for text in outputs:
        for piece in pieces(password):
            assert piece not in text, (piece, text)


def env_without_password(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "ROLLOUTFLEET_REDIS_PASSWORD"}, **extra}


def cli(*args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_without_password(**env),
    )  # fmt: skip


def worker(url: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    config = WorkerConfig(job=small_job("secret", replicas=1), worker_index=0, num_workers=1, redis_url=url,
                          metrics_port=0)  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "worker"], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env=env_without_password(**config.to_environ(), ROLLOUTFLEET_TERMINATION_LOG=str(tmp_path / "term"), **env),
    )  # fmt: skip


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=180)
    return process.returncode, out, err


def stderr_line(err: str, prefix: str) -> str:
    """The one line of a failed command (a worker also writes JSON log lines: not counted)."""
    lines = [line for line in err.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def url_forms(password: str, host: str) -> dict[str, str]:
    """The password raw and percent-encoded; a raw ``%`` that starts no escape is refused."""
    return {"raw": f"redis://:{password}@{host}", "encoded": f"redis://:{urllib.parse.quote(password, safe='')}@{host}"}


def raw_is_refused(password: str) -> bool:
    return re.search(r"%(?![0-9A-Fa-f]{2})", password) is not None


@pytest.mark.parametrize("password", PASSWORDS)
def test_no_error_path_shows_the_password(password: str, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    started: dict[str, subprocess.Popen[str]] = {}
    for form, url in url_forms(password, f"127.0.0.1:{port}/0").items():
        (tmp_path / form).mkdir()
        started[f"streams {form}"] = cli("streams", "--redis", url, "--timeout", "1")
        started[f"consume {form}"] = cli("consume", "--redis", url, "--job", "x", "--count", "1", "--timeout", "1",
                                         "--output", str(tmp_path / "x.npz"))  # fmt: skip
        started[f"run {form}"] = cli("run", MANIFEST, "--redis", url, "--redis-timeout", "1", "--no-status")
        started[f"worker {form}"] = worker(url, tmp_path / form, ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS="1")
    encoded = urllib.parse.quote(password, safe="")
    started["bad port"] = cli("streams", "--redis", f"redis://:{encoded}@127.0.0.1:63x9/0")
    started["bad host"] = cli("streams", "--redis", f"redis://:{encoded}@bad host/0")
    started["worker bad port"] = worker(f"redis://:{encoded}@127.0.0.1:63x9/0", tmp_path)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(Path(MANIFEST).read_text() + f"  redis:\n    url: redis://:{password}@redis:6379/0\n")
    started["validate"] = cli("validate", "--spec-only", str(manifest))
    started["run manifest"] = cli("run", str(manifest), "--no-status", "--duration", "1")
    results = {name: finish(process) for name, process in started.items()}
    for name, (code, out, err) in results.items():
        assert_hidden(password, out, err)
        refused = raw_is_refused(password) and name.endswith(" raw")
        if name.startswith(("streams", "consume", "run ")) and not name.startswith("run manifest"):
            command = name.split()[0]
            line = stderr_line(err, f"rolloutfleet {command}:")
            expected = ("holds a '%' that starts no percent-escape", 2) if refused else (
                f"redis at 127.0.0.1:{port}: connection refused (tried for 1 s)", 1)  # fmt: skip
            assert expected[0] in line and code == expected[1], (name, line, code)
        elif name.startswith("worker ") and name != "worker bad port":
            line = stderr_line(err, "rolloutfleet worker:")
            assert ("percent-escape" in line and code == 3) if refused else ("connection refused" in line and code == 4)
        elif name == "worker bad port":
            assert "is not a Redis URL: its port is not a number" in stderr_line(err, "rolloutfleet worker:")
            assert code == 3
            assert_hidden(password, (tmp_path / "term").read_text())
        elif name in ("validate", "run manifest"):
            assert "spec.redis.url:" in stderr_line(err, "rolloutfleet:") and code == 2, (name, err)
        else:
            assert "is not a Redis URL" in stderr_line(err, "rolloutfleet streams:") and code == 2, (name, err)


@pytest.mark.parametrize("password", PASSWORDS)
def test_the_password_is_read_right_and_a_wrong_one_not_shown(password: str, own_redis: RedisServer) -> None:
    own_redis.client().config_set("requirepass", password)
    host = f"127.0.0.1:{own_redis.port}/0"
    forms = url_forms(password, host)
    wrong = f"redis://:{urllib.parse.quote(password[::-1], safe='')}@{host}"  # refused: its pieces are the same
    processes = {form: cli("streams", "--redis", url, "--timeout", "5") for form, url in forms.items()}
    processes["wrong"] = cli("streams", "--redis", wrong, "--timeout", "5")
    processes["from the environment"] = cli("streams", "--redis", f"redis://{host}", "--timeout", "5",
                                            ROLLOUTFLEET_REDIS_PASSWORD=password)  # fmt: skip
    for form, process in processes.items():
        code, out, err = finish(process)
        assert_hidden(password, out, err)
        if form == "wrong":
            assert "authentication failed" in stderr_line(err, "rolloutfleet streams:") and code == 1
        elif form == "raw" and raw_is_refused(password):
            assert "percent-escape" in stderr_line(err, "rolloutfleet streams:") and code == 2
        else:
            assert code == 0 and "0 job streams" in out, (form, err)


def test_a_worker_publishes_with_a_password_of_every_special_character(own_redis: RedisServer, tmp_path: Path) -> None:
    password = PASSWORDS[0]
    own_redis.client().config_set("requirepass", password)
    process = worker(f"redis://:{password}@127.0.0.1:{own_redis.port}/0", tmp_path)
    try:
        consumer = BatchConsumer(
            f"redis://127.0.0.1:{own_redis.port}/0", "secret", password=password, reconnect_timeout_s=10
        )
        got = consumer.read(count=1, timeout=120)
        assert len(got) == 1 and got[0].metadata.worker_index == 0
        consumer.close()
        # What Redis shows of its clients (names, commands) holds no password either.
        admin = redis.Redis(port=own_redis.port, password=password)
        assert_hidden(password, json.dumps(admin.client_list(), default=str))
        admin.close()
    finally:
        process.send_signal(signal.SIGTERM)
        code, out, err = finish(process)
    assert code == 0, err
    assert_hidden(password, out, err)

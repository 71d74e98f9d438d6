"""A worker whose per-job Redis user is revoked mid-run (:mod:`rolloutfleet.transport.redis.acl`):
one NOPERM line, not ready, no exit (no crash loop); batches flow again once the operator
re-applies the user. The credentials come from the environment, never the command line."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.transport.redis.acl import job_users, password_hash
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet.test_worker import probe, start_worker, wait_probe
from tests.integration.fleet_helpers import wait_until
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

PASSWORD = "w/x#y?z@%25 q"


def test_a_revoked_user_is_one_noperm_line_and_no_crash_loop(own_redis: RedisServer, tmp_path: Path) -> None:
    admin = own_redis.client()
    users = job_users("default", "w")
    admin.execute_command("ACL", "SETUSER", *users.worker.setuser_args([password_hash(PASSWORD)]))
    port, log = free_port(), tmp_path / "worker.stderr"
    batches = job_keys("default", "w").batches
    with log.open("w") as stderr:
        worker = start_worker(own_redis.url, port, tmp_path, stderr=stderr, log_level="INFO",
                              ROLLOUTFLEET_REDIS_USERNAME=users.worker.name, ROLLOUTFLEET_REDIS_PASSWORD=PASSWORD)  # fmt: skip
    try:
        wait_until(lambda: admin.exists(batches) and admin.xlen(batches) > 0, 90, "a first batch")
        assert PASSWORD not in " ".join(Path(f"/proc/{worker.pid}/cmdline").read_text().split("\0"))
        revoked = [users.worker.name, "reset", "on", f"#{password_hash(PASSWORD)}", "-@all", "+@connection", "+info"]
        admin.execute_command("ACL", "SETUSER", *revoked)  # still logs in; every data command refused
        wait_until(lambda: "NOPERM" in log.read_text(), 60, "the NOPERM line")
        wait_probe(port, "/readyz", 503, 30)
        assert worker.poll() is None and probe(port, "/healthz") == 200
        admin.execute_command("ACL", "SETUSER", *users.worker.setuser_args([password_hash(PASSWORD)]))
        before = admin.xlen(batches)
        wait_until(lambda: admin.xlen(batches) > before, 90, "batches after the user came back")
        wait_probe(port, "/readyz", 200, 30)
        text = log.read_text()
        assert text.count("NOPERM") == 1, text  # one line for the one refusal, however many retries
        assert "Traceback" not in text and PASSWORD not in text and "w/x#y" not in text
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
    finally:
        worker.kill()

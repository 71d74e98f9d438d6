"""Per-job Redis users on a real API server and the test kubelet (:mod:`rolloutfleet_operator.redis.users`):
the operator, holding the admin password of one Redis, mints ``<job>-redis-worker`` and
``<job>-redis-learner`` owned by the job; the worker pods take the user and password by
``secretKeyRef`` and publish as that user; a job on a Redis the operator cannot administer
says so in its ``RedisIsolated`` condition; a deleted Secret comes back while the running
worker keeps publishing with the password it holds (old passwords stay valid until the
pods that hold them are gone); no password reaches the status, Events or the operator's log."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.transport.redis.acl import job_users
from rolloutfleet.transport.redis.keys import job_keys
from tests.e2e.cluster_kit import OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest, read_secret

ADMIN = "adm/in#pass?@%word"


def condition(jobs: Jobs, name: str) -> dict[str, Any]:
    found = [c for c in jobs.status(name).get("conditions") or [] if c["type"] == "RedisIsolated"]
    return found[0] if found else {}


def value(found: client.V1Secret, key: str) -> str:
    return base64.b64decode(found.data[key]).decode()


@pytest.fixture
def admin_redis() -> Any:
    server = EmbeddedRedis().start()
    admin = redis.Redis(port=server.port)
    admin.config_set("requirepass", ADMIN)
    yield server, redis.Redis(port=server.port, password=ADMIN)
    server.stop()


def test_the_operator_mints_owned_secrets_and_workers_publish_as_their_job_user(
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    core: client.CoreV1Api,
    redis_server: EmbeddedRedis,
    admin_redis: Any,
    tmp_path: Path,
) -> None:
    server, admin = admin_redis
    operator = operators.start(ROLLOUTFLEET_REDIS_ADMIN_URL=server.url, ROLLOUTFLEET_REDIS_ADMIN_PASSWORD=ADMIN)
    jobs.create(job_manifest("iso", server.url, replicas=1))
    # A Redis the operator holds no admin credential of (suspended: the pods here share one port range).
    jobs.create(job_manifest("shared", redis_server.url, replicas=1, suspend=True))
    wait_for(lambda: condition(jobs, "iso").get("status") == "True", 90, jobs.describe)
    uid = jobs.get("iso")["metadata"]["uid"]
    minted = {}
    for role in ("worker", "learner"):
        found = read_secret(core, namespace, f"iso-redis-{role}")
        assert found is not None
        [owner] = found.metadata.owner_references
        assert (owner.kind, owner.name, owner.uid, owner.controller) == ("RolloutJob", "iso", uid, True)
        assert value(found, "username") == getattr(job_users(namespace, "iso"), role).name
        minted[role] = value(found, "password")
    wait_for(lambda: jobs.running("iso", 1), 90, jobs.describe)
    [pod] = jobs.pods("iso").values()
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    for var, key in (("ROLLOUTFLEET_REDIS_USERNAME", "username"), ("ROLLOUTFLEET_REDIS_PASSWORD", "password")):
        assert env[var] == {"name": var, "valueFrom": {"secretKeyRef": {"name": "iso-redis-worker", "key": key}}}
    assert not any(minted["worker"] in arg for arg in pod["spec"]["containers"][0]["command"])
    batches = job_keys(namespace, "iso").batches
    wait_for(lambda: admin.exists(batches) and admin.xlen(batches) > 0, 90, jobs.describe)
    clients = [c for c in admin.client_list() if c.get("user") == job_users(namespace, "iso").worker.name]
    assert clients, admin.client_list()  # the worker is logged in as its job's user, not as default

    shared = wait_for(lambda: condition(jobs, "shared") or None, 60, jobs.describe)
    assert (shared["status"], shared["reason"]) == ("False", "NoAdminCredential")
    assert read_secret(core, namespace, "shared-redis-worker") is None

    # A deleted Secret comes back with a new password; the running worker keeps publishing.
    core.delete_namespaced_secret("iso-redis-worker", namespace)
    back = wait_for(lambda: read_secret(core, namespace, "iso-redis-worker"), 120, jobs.describe)
    assert value(back, "password") != minted["worker"]
    hashes = admin.acl_getuser(job_users(namespace, "iso").worker.name)["passwords"]
    assert len(hashes) == 2  # the new one, and the one the running pod holds

    def last() -> bytes:  # the stream is capped (maxLen): its newest entry tells new batches
        return bytes(admin.xrevrange(batches, count=1)[0][0])

    before = last()
    wait_for(lambda: last() != before, 60, jobs.describe)

    # No password in the status, the Events or the operator's log.
    passwords = [ADMIN, minted["worker"], minted["learner"], value(back, "password")]
    events = core.list_namespaced_event(namespace).items
    shown = [str(jobs.status("iso")), str(jobs.status("shared")), operator.text()]
    shown += [f"{e.reason} {e.message}" for e in events]
    assert not [p for p in passwords if any(p in text for text in shown)]
    assert any(e.reason == "RedisUserMinted" for e in events)

"""The minimal manifest on a real API server and the test kubelet (:mod:`rolloutfleet_operator.redis.defaults`):
a RolloutJob whose spec names no Redis gets the one the operator was installed with
(``ROLLOUTFLEET_DEFAULT_REDIS_URL``): its workers publish there as the job's own minted user,
and the status says what was filled in. For a ``rediss://`` default the operator's CA is
copied into the job's namespace as ``<job>-redis-ca``, owned by the job, and mounted by its
workers; a job that names its own Redis keeps it. The API server stores no URL the manifest
did not give (the CRD defaults none)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import redis
from kubernetes import client

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet.transport.redis.acl import job_users
from rolloutfleet.transport.redis.keys import job_keys
from tests.e2e.cluster_kit import OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, read_secret

ADMIN = "adm/in#pass?@%word"
CA = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


def minimal(name: str, **spec: Any) -> dict[str, Any]:
    """A manifest as short as a user writes it: no ``redis`` section."""
    body = {"replicas": 1, "env": {"id": "CartPole-v1", "numEnvs": 2}, "sampling": {"rolloutFragmentLength": 50}}
    return {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": name},
            "spec": {**body, **spec}}  # fmt: skip


@pytest.fixture
def admin_redis() -> Any:
    server = EmbeddedRedis().start()
    redis.Redis(port=server.port).config_set("requirepass", ADMIN)
    yield server, redis.Redis(port=server.port, password=ADMIN)
    server.stop()


def test_a_job_without_redis_publishes_to_the_operators_as_its_own_user(
    operators: OperatorFactory, jobs: Jobs, namespace: str, admin_redis: Any
) -> None:
    server, admin = admin_redis
    operators.start(
        ROLLOUTFLEET_DEFAULT_REDIS_URL=server.url,
        ROLLOUTFLEET_REDIS_ADMIN_URL=server.url,
        ROLLOUTFLEET_REDIS_ADMIN_PASSWORD=ADMIN,
    )
    jobs.create(minimal("small"))
    assert "url" not in jobs.get("small")["spec"].get("redis", {})  # the API server filled in no URL
    batches = job_keys(namespace, "small").batches
    wait_for(lambda: admin.exists(batches) and admin.xlen(batches) > 0, 120, jobs.describe)
    worker_user = job_users(namespace, "small").worker.name
    assert any(c.get("user") == worker_user for c in admin.client_list()), admin.client_list()
    status = wait_for(lambda: jobs.status("small") if "redisDefaults" in jobs.status("small") else None, 60)
    assert status["redisDefaults"] == {"url": server.url}
    assert ADMIN not in str(status)


def test_a_tls_default_copies_the_operators_ca_owned_by_the_job(
    operators: OperatorFactory, jobs: Jobs, namespace: str, core: client.CoreV1Api, tmp_path: Path
) -> None:
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text(CA)
    url = "rediss://fleet-redis.ops.svc:6379/0"
    operators.start(ROLLOUTFLEET_DEFAULT_REDIS_URL=url, ROLLOUTFLEET_REDIS_CA_FILE=str(ca_file))
    jobs.create(minimal("tls"))
    jobs.create(minimal("own", redis={"url": "redis://elsewhere:6379/0"}))
    copy = wait_for(lambda: read_secret(core, namespace, "tls-redis-ca"), 60, jobs.describe)
    assert base64.b64decode(copy.data["ca.crt"]).decode() == CA and set(copy.data) == {"ca.crt"}
    [owner] = copy.metadata.owner_references
    assert (owner.kind, owner.name, owner.uid) == ("RolloutJob", "tls", jobs.get("tls")["metadata"]["uid"])
    pods = wait_for(lambda: jobs.pods("tls") or None, 60, jobs.describe)
    [pod] = pods.values()
    mounted = [v for v in pod["spec"].get("volumes") or [] if v.get("secret", {}).get("secretName") == "tls-redis-ca"]
    assert len(mounted) == 1 and mounted[0]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["ROLLOUTFLEET_REDIS_URL"] == url and env[CA_FILE_ENV].endswith("/ca.crt")
    status = wait_for(lambda: jobs.status("tls") if "redisDefaults" in jobs.status("tls") else None, 60)
    assert status["redisDefaults"] == {"url": url, "caSecret": "tls-redis-ca"}
    own = wait_for(lambda: jobs.pods("own") or None, 60, jobs.describe)
    [own_pod] = own.values()
    own_env = {e["name"]: e.get("value") for e in own_pod["spec"]["containers"][0]["env"]}
    assert own_env["ROLLOUTFLEET_REDIS_URL"] == "redis://elsewhere:6379/0" and CA_FILE_ENV not in own_env
    assert "redisDefaults" not in jobs.status("own") and read_secret(core, namespace, "own-redis-ca") is None

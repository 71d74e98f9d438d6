"""The Redis a job gets when its manifest names none (:mod:`rolloutfleet_operator.redis.defaults`)."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet_operator.children.pods import build_pod
from rolloutfleet_operator.config import ConfigError, OperatorConfig
from rolloutfleet_operator.redis.defaults import ca_secret_manifest, copies_ca, defaults_status, job_of

TLS = "rediss://fleet-redis.ops.svc:6379/0"
KEY = ("rl", "cp")


def spec(**redis: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"env": {"id": "CartPole-v1"}}
    if redis:
        body["redis"] = redis
    return body


def test_a_job_without_a_url_gets_the_operators_redis_and_its_ca() -> None:
    config = OperatorConfig(default_redis_url=TLS, redis_ca_file="/etc/ca.crt")
    job = job_of(KEY, spec(), config)
    assert job.spec.redis.url == TLS
    assert job.spec.redis.tls is not None and job.spec.redis.tls.ca_secret is not None
    assert (job.spec.redis.tls.ca_secret.name, job.spec.redis.tls.ca_secret.key) == ("cp-redis-ca", "ca.crt")
    assert defaults_status(spec(), job, config) == {"url": TLS, "caSecret": "cp-redis-ca"}
    assert copies_ca(spec(), job, config)


def test_the_manifests_own_settings_stay() -> None:
    config = OperatorConfig(default_redis_url=TLS, redis_ca_file="/etc/ca.crt")
    own = spec(url="redis://mine:6379/0")
    job = job_of(KEY, own, config)
    assert job.spec.redis.url == "redis://mine:6379/0" and job.spec.redis.tls is None
    assert defaults_status(own, job, config) is None and not copies_ca(own, job, config)
    # Other redis fields but no url: the URL is filled in, the fields kept.
    partial = spec(maxLen=7, tls={"caSecret": {"name": "my-ca"}})
    job = job_of(KEY, partial, config)
    assert (job.spec.redis.url, job.spec.redis.max_len) == (TLS, 7)
    assert job.spec.redis.tls is not None and job.spec.redis.tls.ca_secret is not None
    assert job.spec.redis.tls.ca_secret.name == "my-ca"  # its own CA, not a copy of the operator's
    assert defaults_status(partial, job, config) == {"url": TLS} and not copies_ca(partial, job, config)


def test_without_the_setting_the_specs_default_stands_and_plain_urls_copy_no_ca() -> None:
    job = job_of(KEY, spec(), OperatorConfig())
    assert job.spec.redis.url == "redis://localhost:6379/0" and defaults_status(spec(), job, OperatorConfig()) is None
    plain = OperatorConfig(default_redis_url="redis://fleet-redis.ops.svc:6379/0", redis_ca_file="/etc/ca.crt")
    job = job_of(KEY, spec(), plain)
    assert job.spec.redis.tls is None and defaults_status(spec(), job, plain) == {"url": plain.default_redis_url}


def test_the_pods_of_a_defaulted_job_mount_the_copy_and_log_in_as_the_jobs_user() -> None:
    config = OperatorConfig(
        default_redis_url=TLS, redis_ca_file="/etc/ca.crt", redis_admin_url=TLS, redis_admin_password="x"
    )
    job = job_of(KEY, spec(), config)
    pod = build_pod(job, "uid-1", 0, config, "hash")
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["ROLLOUTFLEET_REDIS_URL"]["value"] == TLS
    assert env["ROLLOUTFLEET_REDIS_USERNAME"]["valueFrom"]["secretKeyRef"]["name"] == "cp-redis-worker"
    assert env[CA_FILE_ENV]["value"].endswith("/ca.crt")
    [volume] = [v for v in pod["spec"]["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "cp-redis-ca"


def test_the_ca_secret_holds_the_certificate_alone_owned_by_the_job() -> None:
    job = job_of(KEY, spec(), OperatorConfig(default_redis_url=TLS, redis_ca_file="/etc/ca.crt"))
    owner = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "name": "cp", "uid": "u"}
    secret = ca_secret_manifest(job, owner, "PEM", {"rolloutfleet.io/job": "cp"})
    assert secret["metadata"]["name"] == "cp-redis-ca" and secret["metadata"]["namespace"] == "rl"
    assert secret["metadata"]["ownerReferences"] == [owner] and secret["stringData"] == {"ca.crt": "PEM"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("redis://:pw@r:6379/0", "ROLLOUTFLEET_DEFAULT_REDIS_URL: must hold no password"),
        ("http://r:6379", "ROLLOUTFLEET_DEFAULT_REDIS_URL: "),
    ],
)
def test_a_bad_default_url_stops_the_start_naming_the_variable(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        OperatorConfig.from_environ({"ROLLOUTFLEET_DEFAULT_REDIS_URL": value})


def test_the_settings_are_read() -> None:
    config = OperatorConfig.from_environ({"ROLLOUTFLEET_DEFAULT_REDIS_URL": TLS, "ROLLOUTFLEET_REDIS_CA_FILE": "/c"})
    assert (config.default_redis_url, config.redis_ca_file) == (TLS, "/c")


def test_the_chart_redis_read_replicas_come_with_its_url_unless_the_job_names_its_own() -> None:
    replicas = "rediss://fleet-redis-replica-0.fleet-redis-replica.ops.svc:6379/0,rediss://fleet-redis-replica-1.fleet-redis-replica.ops.svc:6379/0"
    config = OperatorConfig.from_environ(
        {"ROLLOUTFLEET_DEFAULT_REDIS_URL": TLS, "ROLLOUTFLEET_DEFAULT_REDIS_REPLICAS": replicas}
    )
    assert config.default_redis_replicas == tuple(replicas.split(","))
    job = job_of(KEY, spec(), config)
    assert job.spec.redis.read_replicas == replicas.split(",")
    assert defaults_status(spec(), job, config) == {"url": TLS, "readReplicas": replicas.split(",")}
    own = spec(readReplicas=["rediss://mine-0:6379/0"])
    assert job_of(KEY, own, config).spec.redis.read_replicas == ["rediss://mine-0:6379/0"]
    assert job_of(KEY, spec(url="redis://elsewhere:6379/0"), config).spec.redis.read_replicas == []
    with pytest.raises(ConfigError, match="ROLLOUTFLEET_DEFAULT_REDIS_REPLICAS: must hold no password"):
        OperatorConfig.from_environ({"ROLLOUTFLEET_DEFAULT_REDIS_REPLICAS": "redis://:pw@r:6379/0"})

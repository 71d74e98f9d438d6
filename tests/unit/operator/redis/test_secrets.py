"""Which jobs get per-job Redis users, what their Secrets hold, and when old passwords retire (pure)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.acl import password_hash
from rolloutfleet_operator.children.pods import build_pod
from rolloutfleet_operator.config import ConfigError, OperatorConfig
from rolloutfleet_operator.redis.secrets import (
    MINTED,
    PREVIOUS,
    RETIRE,
    admin_source,
    retire_previous,
    secret_manifest,
)

CHART = OperatorConfig(redis_admin_url="redis://rolloutfleet-redis.rl.svc:6379/0", redis_admin_password="x")


def job(url: str, namespace: str = "rl", **redis: Any) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": namespace},
                                 "spec": {"env": {"id": "CartPole-v1"}, "redis": {"url": url, **redis}}})  # fmt: skip


@pytest.mark.parametrize(
    ("url", "namespace", "expected"),
    [
        ("redis://rolloutfleet-redis:6379/0", "rl", "operator"),  # the Service's short name, in its namespace
        ("redis://rolloutfleet-redis.rl:6379/0", "other", "operator"),
        ("redis://rolloutfleet-redis.rl.svc.cluster.local:6379/3", "other", "operator"),
        ("redis://rolloutfleet-redis:6379/0", "other", None),  # another namespace's Service of that name
        ("redis://rolloutfleet-redis.rl.svc:6380/0", "rl", None),
        ("redis://redis.example.com:6379/0", "rl", None),
    ],
)
def test_the_operators_admin_covers_jobs_on_its_redis_only(url: str, namespace: str, expected: str | None) -> None:
    assert admin_source(job(url, namespace), CHART) == expected


def test_an_admin_secret_in_the_spec_isolates_any_redis_and_no_admin_isolates_none() -> None:
    assert admin_source(job("redis://mine:6379/0", adminSecret={"name": "a"}), OperatorConfig()) == "spec"
    assert admin_source(job("redis://rolloutfleet-redis:6379/0"), OperatorConfig()) is None
    no_password = OperatorConfig(redis_admin_url=CHART.redis_admin_url)
    assert admin_source(job("redis://rolloutfleet-redis:6379/0"), no_password) is None


def test_an_isolated_jobs_workers_take_their_user_by_secret_key_ref_and_not_the_shared_password() -> None:
    shared = job("redis://rolloutfleet-redis:6379/0", passwordSecret={"name": "rolloutfleet-redis"})
    env = {e["name"]: e for e in build_pod(shared, "uid", 0, CHART)["spec"]["containers"][0]["env"]}
    assert env["ROLLOUTFLEET_REDIS_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "cp-redis-worker",
                                                                               "key": "username"}  # fmt: skip
    assert env["ROLLOUTFLEET_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "cp-redis-worker",
                                                                               "key": "password"}  # fmt: skip
    env = {e["name"]: e for e in build_pod(shared, "uid", 0, OperatorConfig())["spec"]["containers"][0]["env"]}
    assert "ROLLOUTFLEET_REDIS_USERNAME" not in env
    assert env["ROLLOUTFLEET_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "rolloutfleet-redis"


def test_the_secret_is_owned_by_the_job_and_keeps_only_other_passwords_hashes() -> None:
    owner = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "name": "cp", "uid": "u1"}
    old = password_hash("old")
    made = secret_manifest(job("redis://r:6379/0"), owner, "worker", "rolloutfleet/rl/cp/worker", "new/#?@%",
                           [old, password_hash("new/#?@%")], "2026-11-26T04:00:00Z")  # fmt: skip
    assert made["metadata"]["name"] == "cp-redis-worker" and made["metadata"]["ownerReferences"] == [owner]
    decoded = {k: base64.b64decode(v).decode() for k, v in made["data"].items()}
    assert decoded == {"username": "rolloutfleet/rl/cp/worker", "password": "new/#?@%", "url": "redis://r:6379/0"}
    assert made["metadata"]["annotations"] == {MINTED: "2026-11-26T04:00:00Z", PREVIOUS: old}


def test_a_worker_secrets_old_passwords_retire_once_no_live_pod_started_before_the_mint() -> None:
    annotations = {MINTED: "2026-11-26T04:00:00Z", PREVIOUS: "ab"}
    assert not retire_previous("worker", annotations, ["2026-11-26T03:59:59Z", "2026-11-26T04:01:00Z"])
    assert retire_previous("worker", annotations, ["2026-11-26T04:01:00Z", None])  # None: not started yet
    assert not retire_previous("worker", {MINTED: "2026-11-26T04:00:00Z"}, [])  # nothing to retire
    assert not retire_previous("learner", annotations, [])  # the operator cannot see a learner restart
    assert retire_previous("learner", {**annotations, RETIRE: "true"}, [])


def test_an_admin_url_with_a_password_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        OperatorConfig.from_environ({"ROLLOUTFLEET_REDIS_ADMIN_URL": "redis://:hunter2@r:6379/0"})
    assert "ROLLOUTFLEET_REDIS_ADMIN_URL" in str(caught.value) and "hunter2" not in str(caught.value)
    config = OperatorConfig.from_environ({"ROLLOUTFLEET_REDIS_ADMIN_URL": "redis://r:6379/0",
                                          "ROLLOUTFLEET_REDIS_ADMIN_PASSWORD": "hunter2"})  # fmt: skip
    assert config.redis_admin_password == "hunter2" and "hunter2" not in repr(config)

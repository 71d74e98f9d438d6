"""A job's NetworkPolicy (what its workers may reach) and the CA its workers verify Redis with."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV, CA_MOUNT_DIR
from rolloutfleet_operator.children.network import build_network_policy, egress_rules
from rolloutfleet_operator.children.pods import build_pod, job_labels, owner_reference, template_hash
from rolloutfleet_operator.config import ConfigError, OperatorConfig
from rolloutfleet_operator.loop.reconcile import reconcile
from rolloutfleet_operator.loop.runtime import Runtime
from tests.unit.operator.loop.test_reconcile import KEY, indexed_job

ON = OperatorConfig(worker_network_policy=True)
REDIS_POD = {"podSelector": {"matchLabels": {"app.kubernetes.io/component": "redis"}}}


def job(**spec: Any) -> RolloutJob:
    return RolloutJob.from_dict(
        {"metadata": {"name": "cp", "namespace": "team"}, "spec": {"env": {"id": "CartPole-v1"}, **spec}}
    )


def test_workers_reach_dns_and_redis_on_its_port_only() -> None:
    config = OperatorConfig(worker_network_policy=True, redis_peers=(REDIS_POD,))
    the_job = job(redis={"url": "rediss://redis.rl.svc:6380/0"})
    policy = build_network_policy(the_job, config, job_labels("cp"), owner_reference(the_job, "uid-1"))
    assert policy is not None
    assert policy["metadata"]["name"] == "cp-egress" and policy["metadata"]["namespace"] == "team"
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert policy["spec"]["policyTypes"] == ["Egress"]  # ingress (metrics, an external env's simulators) untouched
    assert policy["spec"]["egress"] == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"ports": [{"port": 6380, "protocol": "TCP"}], "to": [REDIS_POD]},
    ]
    # it selects exactly the job's worker pods, as built
    pod = build_pod(the_job, "uid-1", 0, config)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    other_job = RolloutJob.from_dict(
        {"metadata": {"name": "other", "namespace": "team"}, "spec": {"env": {"id": "CartPole-v1"}}}
    )
    other = build_pod(other_job, "uid-2", 0, config)
    assert not policy["spec"]["podSelector"]["matchLabels"].items() <= other["metadata"]["labels"].items()


def test_workers_reach_their_read_replicas_ports_too() -> None:
    urls = ["rediss://redis-replica-0.rl.svc:6380/0", "rediss://redis-replica-1.rl.svc:7000/0"]
    the_job = job(redis={"url": "rediss://redis.rl.svc:6380/0", "readReplicas": urls})
    assert egress_rules(the_job, ON)[1] == {
        "ports": [{"port": 6380, "protocol": "TCP"}, {"port": 7000, "protocol": "TCP"}]
    }
    assert template_hash(the_job, ON) != template_hash(job(redis={"url": "rediss://redis.rl.svc:6380/0"}), ON)


def test_the_jobs_own_rules_follow_as_the_api_reads_them() -> None:
    rules = [
        {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 443}, {"port": 8000, "endPort": 8100}]},
        {"to": [{"namespaceSelector": {"matchLabels": {"team": "sim"}}}]},
    ]
    found = egress_rules(job(network={"egress": rules}), ON)
    assert found[2:] == [
        {"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}],
         "ports": [{"port": 443, "protocol": "TCP"}, {"port": 8000, "protocol": "TCP", "endPort": 8100}]},
        {"to": [{"namespaceSelector": {"matchLabels": {"team": "sim"}}}]},
    ]  # fmt: skip
    assert egress_rules(job(), ON)[1] == {"ports": [{"port": 6379, "protocol": "TCP"}]}  # no peers named: any address


def test_a_unix_socket_needs_no_redis_rule_and_the_policy_is_off_unless_configured() -> None:
    assert egress_rules(job(redis={"url": "unix:///run/redis.sock"}), ON) == egress_rules(job(), ON)[:1]
    assert build_network_policy(job(), OperatorConfig(), {}, {}) is None


def test_bad_egress_rules_are_refused_naming_the_field() -> None:
    with pytest.raises(
        SpecError, match=r"^spec\.network\.egress\[0\]\.ports\[0\]: port must be from 1 to 65535, got 70000$"
    ):
        job(network={"egress": [{"ports": [{"port": 70000}]}]})
    with pytest.raises(SpecError, match="endPort needs a numeric port"):
        job(network={"egress": [{"ports": [{"port": "https", "endPort": 9000}]}]})


def test_changing_the_egress_replaces_no_pod() -> None:
    before = template_hash(job(), ON)
    assert template_hash(job(network={"egress": [{"ports": [{"port": 443}]}]}), ON) == before


def test_an_operator_upgrade_replaces_no_pod_of_a_job_without_tls() -> None:
    """The hash the operator before spec.redis.tls and spec.network wrote for this job
    (computed by the main branch's operator): pods it made are current for this one."""
    plain = RolloutJob.from_dict({"metadata": {"name": "a"}, "spec": {"env": {"id": "CartPole-v1"}}})
    assert template_hash(plain, OperatorConfig()) == "c8a5d464eaa47fe3"
    tls = {"url": "rediss://localhost:6379/0", "tls": {"caSecret": {"name": "ca"}}}
    rediss = {"url": "rediss://localhost:6379/0"}
    assert template_hash(job(redis=tls), OperatorConfig()) != template_hash(job(redis=rediss), OperatorConfig())


def test_the_ca_secret_is_mounted_read_only_and_named_in_the_environment() -> None:
    the_job = job(redis={"url": "rediss://redis:6379/0", "tls": {"caSecret": {"name": "redis-ca", "key": "root.pem"}}})
    pod = build_pod(the_job, "uid", 0, OperatorConfig())
    (container,) = pod["spec"]["containers"]
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "redis-ca")
    assert volume["secret"] == {
        "secretName": "redis-ca",
        "items": [{"key": "root.pem", "path": "ca.crt"}],
        "defaultMode": 0o444,
    }
    assert {"name": "redis-ca", "mountPath": CA_MOUNT_DIR, "readOnly": True} in container["volumeMounts"]
    assert {"name": CA_FILE_ENV, "value": f"{CA_MOUNT_DIR}/ca.crt"} in container["env"]
    plain = build_pod(job(), "uid", 0, OperatorConfig())
    assert [v["name"] for v in plain["spec"]["volumes"]] == ["tmp"]


def test_a_ca_needs_a_tls_url() -> None:
    with pytest.raises(
        SpecError, match=r"spec\.redis: .*tls\.caSecret verifies a TLS server: the url must start with rediss://"
    ):
        job(redis={"url": "redis://redis:6379/0", "tls": {"caSecret": {"name": "redis-ca"}}})


def test_redis_peers_come_from_the_environment_or_a_one_line_error() -> None:
    config = OperatorConfig.from_environ(
        {"ROLLOUTFLEET_WORKER_NETWORK_POLICY": "1", "ROLLOUTFLEET_REDIS_PEERS": '[{"podSelector": {}}]'}
    )
    assert config.worker_network_policy and config.redis_peers == ({"podSelector": {}},)
    with pytest.raises(ConfigError, match="ROLLOUTFLEET_REDIS_PEERS: must be a JSON list"):
        OperatorConfig.from_environ({"ROLLOUTFLEET_REDIS_PEERS": '{"podSelector": {}}'})


@pytest.mark.asyncio
async def test_the_policy_is_written_before_the_first_pod_and_kept(kube: Any, posted: list[Any]) -> None:
    runtime, body = Runtime(config=ON, api=kube.api()), indexed_job()
    await reconcile(KEY, runtime, {KEY: [body]}, {KEY: []})
    methods = [name for name, _ in kube.calls]
    assert "create_network_policy" in methods and "create_namespaced_pod" in methods
    assert methods.index("create_network_policy") < methods.index("create_namespaced_pod")
    kube.calls.clear()
    await reconcile(KEY, runtime, {KEY: [body]}, {KEY: []})
    assert not kube.named("create_network_policy") and not kube.named("patch_network_policy")
    body["spec"]["network"] = {"egress": [{"ports": [{"port": 443}]}]}
    await reconcile(KEY, runtime, {KEY: [body]}, {KEY: []})
    (patched,) = kube.named("patch_network_policy")
    assert patched["body"]["spec"]["egress"][-1] == {"ports": [{"port": 443, "protocol": "TCP"}]}


@pytest.mark.asyncio
async def test_a_refused_policy_is_reported_once(kube: Any, posted: list[Any]) -> None:
    runtime, body = Runtime(config=ON, api=kube.api()), indexed_job()
    kube.fail(
        "create_network_policy", 422, 'NetworkPolicy.networking.k8s.io "cp-egress" is invalid: spec.egress[2].to[0]'
    )
    await reconcile(KEY, runtime, {KEY: [body]}, {KEY: []})
    runtime.job(KEY).network_policy.sent = None
    await reconcile(KEY, runtime, {KEY: [body]}, {KEY: []})
    warnings = [e for e in posted if e["reason"] == "NetworkPolicyFailed"]
    assert len(warnings) == 1 and "spec.egress[2].to[0]" in warnings[0]["message"]

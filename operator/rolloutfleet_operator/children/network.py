"""What a job's worker pods may reach, and the CA that verifies their Redis.

:func:`build_network_policy`: the job's NetworkPolicy ``<job>-egress`` (owned by the job,
written before its first pod): its workers reach DNS (port 53 anywhere), Redis (the URL's
port and its read replicas', at ``ROLLOUTFLEET_REDIS_PEERS`` when the chart names its Redis pods) and what
``spec.network.egress`` adds; nothing else. Ingress is left alone (metrics scrapes, an
external env's simulators). :func:`ca_mount`: ``spec.redis.tls.caSecret`` as a read-only
volume and ``ROLLOUTFLEET_REDIS_CA_FILE``. Pure functions of the job and the configuration.
"""

from __future__ import annotations

from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.redis_url import parse_redis_url
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV, CA_MOUNT_DIR
from rolloutfleet_operator.config import OperatorConfig

CA_VOLUME = "redis-ca"
DNS_PORTS = ({"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"})


def network_policy_name(job_name: str) -> str:
    return f"{job_name}-egress"


def egress_rules(job: RolloutJob, config: OperatorConfig) -> list[dict[str, Any]]:
    """DNS, Redis, then the job's own rules (``spec.network.egress``) as the API reads them."""
    rules: list[dict[str, Any]] = [{"ports": [dict(p) for p in DNS_PORTS]}]
    url = parse_redis_url(job.spec.redis.url)
    if url.scheme != "unix":  # a socket on the pod's own filesystem needs no network
        ports = dict.fromkeys([url.port, *(parse_redis_url(r).port for r in job.spec.redis.read_replicas)])
        redis_rule: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"} for port in ports]}
        if config.redis_peers:
            redis_rule["to"] = [dict(peer) for peer in config.redis_peers]
        rules.append(redis_rule)
    for rule in job.spec.network.egress:
        own = rule.model_dump(by_alias=True, exclude_none=True)
        rules.append({key: value for key, value in own.items() if value})  # no `to`: anywhere; no `ports`: any
    return rules


def network_policy_spec(job: RolloutJob, config: OperatorConfig, pod_selector: dict[str, str]) -> dict[str, Any]:
    return {
        "podSelector": {"matchLabels": dict(pod_selector)},
        "policyTypes": ["Egress"],
        "egress": egress_rules(job, config),
    }


def build_network_policy(
    job: RolloutJob, config: OperatorConfig, labels: dict[str, str], owner: dict[str, Any]
) -> dict[str, Any] | None:
    """The job's NetworkPolicy ``<job>-egress`` over its worker pods (``labels``), owned by the
    job (``owner``); None unless the operator is told to write them
    (``ROLLOUTFLEET_WORKER_NETWORK_POLICY``)."""
    if not config.worker_network_policy:
        return None
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": network_policy_name(job.name),
            "namespace": job.namespace,
            "labels": dict(labels),
            "ownerReferences": [owner],
        },
        "spec": network_policy_spec(job, config, labels),
    }


def ca_mount(job: RolloutJob) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None:
    """(volume, volumeMount, env var) of ``spec.redis.tls.caSecret``; None without one. Only
    the named key is projected (as ``ca.crt``), read-only."""
    tls = job.spec.redis.tls
    if tls is None or tls.ca_secret is None:
        return None
    secret = tls.ca_secret
    volume = {
        "name": CA_VOLUME,
        "secret": {"secretName": secret.name, "items": [{"key": secret.key, "path": "ca.crt"}], "defaultMode": 0o444},
    }
    mount = {"name": CA_VOLUME, "mountPath": CA_MOUNT_DIR, "readOnly": True}
    env = {"name": CA_FILE_ENV, "value": f"{CA_MOUNT_DIR}/ca.crt"}
    return volume, mount, env

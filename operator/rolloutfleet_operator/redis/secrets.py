"""What the per-job Redis users' Secrets hold and when old passwords retire (pure).

A job is *isolated* when the operator holds an admin credential of its Redis: the job's
``spec.redis.adminSecret``, or the operator's own (``ROLLOUTFLEET_REDIS_ADMIN_URL``, the
chart's Redis) when ``spec.redis.url`` names that Redis's host and port. Its Secrets,
``<job>-redis-worker`` and ``<job>-redis-learner``, hold ``username``, ``password`` and
``url``; annotations keep the SHA-256 hashes of the passwords they replaced (still valid:
pods started before hold them) and when they were minted. A worker Secret's old passwords
retire once every live worker pod started after the mint; a learner Secret's once its
``rolloutfleet.io/retire-previous-passwords`` annotation says ``"true"`` (the operator
cannot see the learner restart). docs/operations/security.md tells the rotation.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.redis_url import parse_redis_url
from rolloutfleet.transport.redis.acl import password_hash
from rolloutfleet_operator.config import OperatorConfig

ROLES = ("worker", "learner")
PREVIOUS = "rolloutfleet.io/previous-password-sha256"
MINTED = "rolloutfleet.io/minted-at"
RETIRE = "rolloutfleet.io/retire-previous-passwords"
ROLE_LABEL = "rolloutfleet.io/redis-user"
CONDITION = "RedisIsolated"


def secret_name(job_name: str, role: str) -> str:
    """``<job>-redis-worker`` or ``<job>-redis-learner``."""
    return f"{job_name}-redis-{role}"


def admin_source(job: RolloutJob, config: OperatorConfig) -> str | None:
    """``"spec"`` (spec.redis.adminSecret), ``"operator"`` (the operator's admin URL names the
    job's Redis), or None: the job is not isolated and uses its passwordSecret as given."""
    if job.spec.redis.admin_secret is not None:
        return "spec"
    if config.redis_admin_url is None or config.redis_admin_password is None:
        return None
    ours, theirs = parse_redis_url(config.redis_admin_url), parse_redis_url(job.spec.redis.url)
    if (ours.scheme == "unix") != (theirs.scheme == "unix"):
        return None
    if ours.scheme == "unix":
        return "operator" if ours.path == theirs.path else None
    same_host = service_host(ours.host, None) == service_host(theirs.host, job.namespace)
    return "operator" if same_host and ours.port == theirs.port else None


def service_host(host: str, namespace: str | None) -> str:
    """A host name as ``<service>.<namespace>`` where it names a Kubernetes Service (``redis``
    in the job's namespace, ``redis.ns``, ``redis.ns.svc``, ``redis.ns.svc.cluster.local``
    are one), else as written (pure)::

        >>> service_host("redis", "rl"), service_host("redis.rl.svc.cluster.local", None)
        ('redis.rl', 'redis.rl')
    """
    host = host.lower().rstrip(".")
    for suffix in (".svc.cluster.local", ".svc"):
        if host.endswith(suffix):
            return host.removesuffix(suffix)
    if "." not in host and namespace and host != "localhost":
        return f"{host}.{namespace}"
    return host


def secret_manifest(
    job: RolloutJob,
    owner: dict[str, Any],
    role: str,
    username: str,
    password: str,
    previous: Iterable[str],
    minted_at: str,
) -> dict[str, Any]:
    """The Secret of ``role``, owned by the job (the garbage collector deletes it with it)."""
    data = {"username": username, "password": password, "url": job.spec.redis.url}
    annotations = {MINTED: minted_at}
    if kept := ",".join(sorted(set(previous) - {password_hash(password)})):
        annotations[PREVIOUS] = kept
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": secret_name(job.name, role),
            "namespace": job.namespace,
            "labels": {"rolloutfleet.io/job": job.name, ROLE_LABEL: role},
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def decoded(data: Mapping[str, str] | None, key: str) -> str | None:
    raw = (data or {}).get(key)
    return base64.b64decode(raw).decode() if raw else None


def previous_hashes(annotations: Mapping[str, str] | None) -> list[str]:
    return [h for h in ((annotations or {}).get(PREVIOUS) or "").split(",") if h]


def retire_previous(role: str, annotations: Mapping[str, str] | None, pod_starts: Iterable[str | None]) -> bool:
    """Whether the Secret's previous passwords may stop working now: a worker Secret's once no
    live pod started before its mint (a pod not started yet reads the new one); a learner
    Secret's when told by its annotation."""
    annotations = annotations or {}
    if not previous_hashes(annotations):
        return False
    if role == "learner":
        return annotations.get(RETIRE) == "true"
    minted = annotations.get(MINTED, "")
    return all(started is None or started >= minted for started in pod_starts)  # RFC 3339 UTC sorts as text


def worker_env(job: RolloutJob) -> list[dict[str, Any]]:
    """The worker container's Redis user and password, by reference to its Secret (never argv)."""
    name = secret_name(job.name, "worker")
    return [
        {"name": "ROLLOUTFLEET_REDIS_USERNAME", "valueFrom": {"secretKeyRef": {"name": name, "key": "username"}}},
        {"name": "ROLLOUTFLEET_REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}}},
    ]

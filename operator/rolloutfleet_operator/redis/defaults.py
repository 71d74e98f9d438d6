"""The Redis of a job whose manifest names none: the one the operator was installed with.

A RolloutJob without ``spec.redis.url`` uses ``ROLLOUTFLEET_DEFAULT_REDIS_URL`` (the chart
sets it to its own Redis, or to ``redis.externalUrl``). For a ``rediss://`` one, the CA the
operator itself trusts (``ROLLOUTFLEET_REDIS_CA_FILE``) is copied into the job's namespace
as the Secret ``<job>-redis-ca`` (key ``ca.crt``, owned by the job: deleted with it) and
becomes the job's ``spec.redis.tls.caSecret``, unless the job names its own. The job's
per-job Redis users are then minted there as for any job on the operator's Redis
(:mod:`.redis_users`), in whatever namespace the job is. The defaults filled in are shown in
``status.redisDefaults`` (never a password). Without the setting, the spec's own default
stands (``redis://localhost:6379/0``), as it always did.

Pure, except :func:`read_ca` (one small file).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.spec.sections.network_spec import CASecretRef, RedisTLSSpec
from rolloutfleet_operator.config import OperatorConfig

CA_KEY = "ca.crt"


def ca_secret_name(job_name: str) -> str:
    """``<job>-redis-ca``: the copy of the operator's CA in the job's namespace."""
    return f"{job_name}-redis-ca"


def defaulted(job: RolloutJob) -> bool:
    """Whether ``job``'s manifest names no Redis URL (the operator's default applies)."""
    return "url" not in job.spec.redis.model_fields_set


def job_of(key: tuple[str, str], spec: Mapping[str, Any], config: OperatorConfig) -> RolloutJob:
    """The RolloutJob of a custom resource's ``spec`` (``key``: namespace, name), with the
    operator's Redis where the manifest names none (:class:`~rolloutfleet.spec.job.SpecError`
    for a spec that cannot be used)."""
    namespace, name = key
    job = RolloutJob.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)})
    return with_defaults(job, config)


def with_defaults(job: RolloutJob, config: OperatorConfig) -> RolloutJob:
    """``job`` with the operator's Redis where its manifest names none; ``job`` itself otherwise.

    >>> job = RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "rl"}, "spec": {"env": {"id": "x"}}})
    >>> config = OperatorConfig(default_redis_url="rediss://fleet-redis.ops.svc:6379/0", redis_ca_file="/ca.crt")
    >>> redis = with_defaults(job, config).spec.redis
    >>> redis.url, redis.tls.ca_secret.name
    ('rediss://fleet-redis.ops.svc:6379/0', 'cp-redis-ca')
    """
    url = config.default_redis_url
    if url is None or not defaulted(job):
        return job
    redis = job.spec.redis
    update: dict[str, Any] = {"url": url}
    if config.default_redis_replicas and not redis.read_replicas:
        update["read_replicas"] = list(config.default_redis_replicas)
    if _copies_ca(job, config):
        update["tls"] = RedisTLSSpec(ca_secret=CASecretRef(name=ca_secret_name(job.name), key=CA_KEY))
    filled = redis.model_copy(update=update)
    return job.model_copy(update={"spec": job.spec.model_copy(update={"redis": filled})})


def _copies_ca(job: RolloutJob, config: OperatorConfig) -> bool:
    """Whether the operator's CA goes with the default URL: a ``rediss://`` one, a CA file the
    operator holds, and no CA of the job's own."""
    url = config.default_redis_url or ""
    tls = job.spec.redis.tls
    own_ca = tls is not None and tls.ca_secret is not None
    return url.lower().startswith("rediss://") and config.redis_ca_file is not None and not own_ca


def defaults_status(spec: Mapping[str, Any], job: RolloutJob, config: OperatorConfig) -> dict[str, Any] | None:
    """``status.redisDefaults``: what the operator filled in (``spec``: the manifest's, ``job``:
    as filled in), None when it filled in nothing."""
    if config.default_redis_url is None or "url" in (spec.get("redis") or {}):
        return None
    shown: dict[str, Any] = {"url": config.default_redis_url}
    tls = job.spec.redis.tls
    if tls is not None and tls.ca_secret is not None and tls.ca_secret.name == ca_secret_name(job.name):
        shown["caSecret"] = ca_secret_name(job.name)
    if config.default_redis_replicas and not (spec.get("redis") or {}).get("readReplicas"):
        shown["readReplicas"] = list(config.default_redis_replicas)
    return shown


def copies_ca(spec: Mapping[str, Any], job: RolloutJob, config: OperatorConfig) -> bool:
    """Whether the operator keeps ``<job>-redis-ca`` for this job (filled in by :func:`with_defaults`)."""
    return "caSecret" in (defaults_status(spec, job, config) or {})


def read_ca(config: OperatorConfig) -> str:
    """The operator's CA (PEM), read from its file each time (a rotated CA is copied on)."""
    assert config.redis_ca_file is not None
    return Path(config.redis_ca_file).read_text()


def ca_secret_manifest(job: RolloutJob, owner: dict[str, Any], pem: str, labels: dict[str, str]) -> dict[str, Any]:
    """The Secret ``<job>-redis-ca`` in the job's namespace: the CA alone (a certificate, never
    a key), owned by the job."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ca_secret_name(job.name),
            "namespace": job.namespace,
            "labels": dict(labels),
            "ownerReferences": [owner],
        },
        "stringData": {CA_KEY: pem},
    }

"""Per-job Redis users, minted and kept by the operator (the rules: :mod:`rolloutfleet.transport.redis.acl`;
the Secrets: :mod:`.redis_secrets`).

Each reconcile calls :func:`keep_users`; at most every :data:`REFRESH_S` it reads the job's two
Secrets, mints a password where one is missing (the hashes the user had stay valid: running
pods hold them), applies both users with ``ACL SETUSER`` on every node of the job's Redis (a
new replica after a failover gets them within :data:`REFRESH_S`), and creates the missing
Secrets *after* Redis knows their passwords. What it finds is the job's ``RedisIsolated``
condition; a failure is said once as an Event. Passwords never reach a log, Event or status.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.acl import AclUser, job_users, password_hash
from rolloutfleet_operator.children.pods import PodView, owner_reference
from rolloutfleet_operator.loop.api_calls import Api, post_event, read_secret_value, refusal_reason
from rolloutfleet_operator.loop.runtime import JobRuntime, Runtime
from rolloutfleet_operator.loop.status import condition
from rolloutfleet_operator.redis.admin import Admin, AdminError, apply_users, current_hashes
from rolloutfleet_operator.redis.secrets import (
    CONDITION,
    PREVIOUS,
    RETIRE,
    ROLES,
    admin_source,
    decoded,
    previous_hashes,
    retire_previous,
    secret_manifest,
    secret_name,
)

REFRESH_S = 60.0
RETRY_S = 10.0  # after a failure
MAX_HELD = 8  # old password hashes kept valid through a re-mint
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Isolation:
    isolated: bool
    reason: str
    message: str
    checked_at: float = 0.0
    learner_login: tuple[str, str] | None = None  # (user, password) for the operator's own reads


NOT_ISOLATED = Isolation(
    False,
    "NoAdminCredential",
    "the job's Redis is not administered by the operator (no spec.redis.adminSecret, and the operator's "
    "ROLLOUTFLEET_REDIS_ADMIN_URL names another Redis): workers use spec.redis.passwordSecret, shared with "
    "every job that holds it",
)


def isolation_condition(isolation: Isolation, generation: int, now: float, previous: Iterable[Any]) -> dict[str, Any]:
    return condition(CONDITION, isolation.isolated, isolation.reason, isolation.message, generation, now, previous)


async def keep_users(
    runtime: Runtime, state: JobRuntime, body: dict[str, Any], job: RolloutJob, uid: str, pods: Iterable[PodView]
) -> Isolation:
    """The job's isolation, its users applied where :data:`REFRESH_S` has passed."""
    source = admin_source(job, runtime.config)
    if source is None:
        return NOT_ISOLATED
    done = state.redis_users
    clock = time.monotonic()
    if isinstance(done, Isolation) and clock - done.checked_at < (REFRESH_S if done.isolated else RETRY_S):
        return done
    try:
        starts = [p.started_at for p in pods if not p.terminated]
        isolation = await _keep(runtime, body["metadata"], job, uid, source, starts)
    except AdminError as error:
        isolation = Isolation(False, "RedisUsersFailed", f"the job's Redis users could not be applied: {error}")
    isolation = Isolation(isolation.isolated, isolation.reason, isolation.message, clock, isolation.learner_login)
    previous = done if isinstance(done, Isolation) else None
    if not isolation.isolated and (previous is None or previous.message != isolation.message):
        post_event(body["metadata"], "Warning", isolation.reason, isolation.message)
    state.redis_users = isolation
    return isolation


async def _keep(
    runtime: Runtime, meta: dict[str, Any], job: RolloutJob, uid: str, source: str, starts: list[str | None]
) -> Isolation:
    admin = await _admin(runtime, job, source)
    if isinstance(admin, Isolation):
        return admin
    users = job_users(job.namespace, job.name)
    wanted: list[tuple[AclUser, list[str]]] = []
    to_create: list[tuple[dict[str, Any], str]] = []
    logins: dict[str, str] = {}
    for role, user in zip(ROLES, (users.worker, users.learner), strict=True):
        secret = await _read_secret(runtime.api, job.namespace, secret_name(job.name, role))
        if secret is not None and uid not in [o.get("uid") for o in secret["metadata"].get("ownerReferences") or []]:
            return Isolation(False, "SecretNotOwned", f"Secret {secret_name(job.name, role)} exists and is not "
                             "this job's (no owner reference to it): delete or rename it")  # fmt: skip
        password = decoded(secret["data"], "password") if secret else None
        if secret is None or password is None:
            password = secrets.token_urlsafe(32)
            # Running pods may hold these; the newest first (we apply them so): a Secret that
            # keeps failing to be created must not grow the list without bound.
            held = (await asyncio.to_thread(current_hashes, admin, user.name))[:MAX_HELD]
            minted = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            manifest = secret_manifest(job, owner_reference(job, uid), role, user.name, password, held, minted)
            to_create.append((manifest, user.name))
            hashes = [password_hash(password), *previous_hashes(manifest["metadata"]["annotations"])]
        else:
            annotations = secret["metadata"].get("annotations") or {}
            hashes = [password_hash(password)]
            if retire_previous(role, annotations, starts):
                await _forget_previous(runtime.api, job.namespace, secret_name(job.name, role))
            else:
                hashes += previous_hashes(annotations)
        wanted.append((user, hashes))
        logins[role] = password
    nodes = await asyncio.to_thread(apply_users, admin, wanted)
    for manifest, user_name in to_create:  # after Redis knows the password: a pod reading it can log in
        name = manifest["metadata"]["name"]
        refusal = await _create_secret(runtime.api, manifest)
        if refusal is not None:
            return Isolation(False, "SecretRefused", f"Secret {name} could not be created: {refusal}")
        post_event(meta, "Normal", "RedisUserMinted", f"Secret {name}: a new password for Redis user {user_name}")
    message = (f"workers log in as Redis user {users.worker.name} (Secret {secret_name(job.name, 'worker')}), "
               f"learners as {users.learner.name} (Secret {secret_name(job.name, 'learner')}); "
               f"applied on {nodes} Redis node(s)")  # fmt: skip
    return Isolation(True, "PerJobUsers", message, learner_login=(users.learner.name, logins["learner"]))


async def _admin(runtime: Runtime, job: RolloutJob, source: str) -> Admin | Isolation:
    config = runtime.config
    if source == "operator":
        assert config.redis_admin_url is not None
        replicas = tuple(job.spec.redis.read_replicas)
        return Admin(
            config.redis_admin_url, config.redis_admin_username, config.redis_admin_password, replicas=replicas
        )
    ref = job.spec.redis.admin_secret
    assert ref is not None
    password = await read_secret_value(runtime.api, job.namespace, ref.name, ref.key)
    if password is None:
        return Isolation(False, "AdminSecretMissing", f"spec.redis.adminSecret: Secret {ref.name} with key "
                         f"{ref.key} is missing or not readable by the operator")  # fmt: skip
    username = await read_secret_value(runtime.api, job.namespace, ref.name, "username")
    return Admin(job.spec.redis.url, username, password, f"Secret {ref.name}", tuple(job.spec.redis.read_replicas))


async def _read_secret(api: Api, namespace: str, name: str) -> dict[str, Any] | None:
    async with api.slots:
        try:
            secret = await asyncio.to_thread(api.core.read_namespaced_secret, name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise AdminError(f"Secret {name}: {refusal_reason(error)}") from None
    meta = secret.metadata or client.V1ObjectMeta()
    owners = [{"uid": o.uid} for o in (meta.owner_references or [])]
    return {"metadata": {"annotations": meta.annotations or {}, "ownerReferences": owners}, "data": secret.data or {}}


async def _create_secret(api: Api, manifest: dict[str, Any]) -> str | None:
    async with api.write():
        try:
            await asyncio.to_thread(api.core.create_namespaced_secret, manifest["metadata"]["namespace"],
                                    cast(Any, manifest), _preload_content=False)  # fmt: skip
        except ApiException as error:
            return refusal_reason(error)
    log.info("created Secret %s/%s", manifest["metadata"]["namespace"], manifest["metadata"]["name"])
    return None


async def _forget_previous(api: Api, namespace: str, name: str) -> None:
    patch = {"metadata": {"annotations": {PREVIOUS: None, RETIRE: None}}}
    async with api.write():
        try:
            await asyncio.to_thread(api.core.patch_namespaced_secret, name, namespace, patch, _preload_content=False)
        except ApiException as error:
            raise AdminError(f"Secret {name}: {refusal_reason(error)}") from None

"""A job's children kept beside its pods: its PodDisruptionBudget, an external env's Service,
its NetworkPolicy and the copy of the operator's Redis CA (:mod:`.redis_defaults`). Each is
applied (create, else patch) when what it should be changed, and again every while (none but
the PDB is watched), with the job's owner reference, so the garbage collector deletes it with
the job; a refusal (a missing RBAC rule, a bad value) is said once as a Warning Event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.network import build_network_policy
from rolloutfleet_operator.children.pods import build_pdb, build_service, job_labels, owner_reference, pdb_spec
from rolloutfleet_operator.loop.api_calls import (
    apply_network_policy,
    apply_pdb,
    apply_secret,
    apply_service,
    post_event,
)
from rolloutfleet_operator.loop.runtime import JobRuntime, Owned, Runtime
from rolloutfleet_operator.redis.defaults import ca_secret_manifest, copies_ca, read_ca

PDB_RETRY_S = 30.0  # a PDB sent but not yet in the index (or refused) is sent again after this
SERVICE_REFRESH_S = 300.0  # an external env's Service (not watched) is applied again after this


async def keep_owned(
    owned: Owned,
    wanted: dict[str, Any],
    apply: Callable[[], Awaitable[str | None]],
    *,
    clock: float,
    refresh_s: float,
    warn: Callable[[str], None],
) -> None:
    """Keep one child of a job (its PodDisruptionBudget, Service or NetworkPolicy): ``apply``
    it unless the spec ``wanted`` was applied within ``refresh_s``; refused (a missing RBAC
    rule, a bad value), it is tried again after :data:`PDB_RETRY_S` and the refusal is said
    once through ``warn``, until it changes."""
    sent = owned.sent
    if sent is not None and sent[0] == wanted and clock - sent[1] < refresh_s:
        return
    refusal = await apply()
    owned.sent = (wanted, clock if refusal is None else clock - refresh_s + PDB_RETRY_S)
    if refusal is not None and refusal != owned.reported:
        warn(refusal)
    owned.reported = refusal or ""


def _warn(body: dict[str, Any], reason: str) -> Callable[[str], None]:
    return lambda refusal: post_event(body["metadata"], "Warning", reason, f"the API server refused it: {refusal}")


async def keep_pdb(
    runtime: Runtime,
    state: JobRuntime,
    body: dict[str, Any],
    job: RolloutJob,
    uid: str,
    indexed: list[dict[str, Any]],
    clock: float,
) -> None:
    """Create or patch the job's PodDisruptionBudget where the index shows none like the
    spec's: no call while it agrees, one per :data:`PDB_RETRY_S` while the watch lags."""
    wanted = pdb_spec(job)
    if indexed and uid in indexed[0]["owners"] and all(indexed[0]["spec"].get(k) == v for k, v in wanted.items()):
        state.pdb.sent = None
        return
    if indexed and uid not in indexed[0]["owners"]:
        return  # a previous job's of the same name: the garbage collector deletes it first
    await keep_owned(state.pdb, wanted, lambda: apply_pdb(runtime.api, build_pdb(job, uid)), clock=clock,
                     refresh_s=PDB_RETRY_S, warn=_warn(body, "PodDisruptionBudgetFailed"))  # fmt: skip


async def keep_service(
    runtime: Runtime, state: JobRuntime, body: dict[str, Any], job: RolloutJob, uid: str, clock: float
) -> None:
    """An external env's Service: applied at the first reconcile, when its spec changes, and
    every :data:`SERVICE_REFRESH_S` (one cheap call; a deleted Service comes back). The job's
    owner reference lets the garbage collector delete it with the job."""
    service = build_service(job, uid)
    if service is not None:
        await keep_owned(state.service, service["spec"], lambda: apply_service(runtime.api, service), clock=clock,
                         refresh_s=SERVICE_REFRESH_S, warn=_warn(body, "ServiceFailed"))  # fmt: skip


async def keep_network_policy(
    runtime: Runtime, state: JobRuntime, body: dict[str, Any], job: RolloutJob, uid: str, clock: float
) -> None:
    """The job's NetworkPolicy (:mod:`.network`), kept as :func:`keep_service` keeps a Service."""
    policy = build_network_policy(job, runtime.config, job_labels(job.name), owner_reference(job, uid))
    if policy is not None:
        await keep_owned(state.network_policy, policy["spec"], lambda: apply_network_policy(runtime.api, policy),
                         clock=clock, refresh_s=SERVICE_REFRESH_S, warn=_warn(body, "NetworkPolicyFailed"))  # fmt: skip


async def keep_ca_secret(
    runtime: Runtime, state: JobRuntime, body: dict[str, Any], job: RolloutJob, uid: str, clock: float
) -> None:
    """The copy of the operator's CA a job on the default Redis mounts (:mod:`.redis_defaults`),
    kept as :func:`keep_service` keeps a Service (a rotated CA is copied on at the refresh)."""
    if not copies_ca(body["spec"], job, runtime.config):
        return
    try:
        pem = read_ca(runtime.config)
    except OSError as error:
        state.ca_secret.reported = _said_once(body, state.ca_secret.reported, f"cannot read the operator's CA: {error}")
        return
    secret = ca_secret_manifest(job, owner_reference(job, uid), pem, job_labels(job.name))
    await keep_owned(state.ca_secret, {"ca": pem}, lambda: apply_secret(runtime.api, secret), clock=clock,
                     refresh_s=SERVICE_REFRESH_S, warn=_warn(body, "RedisCASecretFailed"))  # fmt: skip


def _said_once(body: dict[str, Any], said: str, line: str) -> str:
    """A Warning Event ``RedisCASecretFailed`` with ``line``, unless it was the last one said."""
    if line != said:
        post_event(body["metadata"], "Warning", "RedisCASecretFailed", line)
    return line

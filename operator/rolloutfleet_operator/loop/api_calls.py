"""The operator's calls to the Kubernetes API: create and delete pods, patch a job's
status, create or patch its PodDisruptionBudget (and an external env's Service), read a Secret's value, post Events. Thin: each call says what the server
answered, in the terms the reconcile needs; deciding what to call is the reconcile's.

The ``kubernetes`` client is synchronous: calls run in threads, at most
:data:`API_CONCURRENCY` at a time (the default executor and the connection pool are sized
for them in :func:`rolloutfleet_operator.handlers.startup`), and writes start at most
:data:`API_QPS` a second (:mod:`.ratelimit`; a burst of :data:`API_BURST`): chosen so that
a 10 000-worker job starts in under two minutes on an idle API server, and no job,
however big, asks more of it than a ReplicaSet controller's slow start would.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import kopf
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from rolloutfleet_operator import metrics
from rolloutfleet_operator.loop.ratelimit import TokenBucket

JOBS = ("rolloutfleet.io", "v1alpha1", "rolloutjobs")  # group, version, plural of RolloutJob
PDBS = ("policy", "v1", "poddisruptionbudgets")
# Calls in flight: enough that the server's own time per call does not cap the rate below
# API_QPS (200/s at a loaded server's 300 ms a create needs 60 in flight; with 16 a 3 000-pod
# start on the 2-core machine made 45 pods/s, a bare client with 64 made 115/s on the same
# server). The bucket, not this, bounds the load; a slow API server still slows the operator.
API_CONCURRENCY = 64
API_QPS = 200.0  # writes a second (pods, status, PDB, Service), on average
API_BURST = 100  # ... and at once after a quiet spell

log = logging.getLogger(__name__)


@dataclass
class Api:
    """The clients, and the slots that bound the calls in flight."""

    core: k8s.CoreV1Api
    custom: k8s.CustomObjectsApi
    policy: k8s.PolicyV1Api
    networking: k8s.NetworkingV1Api | None = None  # None: no NetworkPolicy is ever written
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(API_CONCURRENCY))
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(API_QPS, API_BURST))

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[None]:
        """A write's turn: a token of the bucket, then a slot."""
        await self.bucket.acquire()
        async with self.slots:
            yield


async def patch_status(api: Api, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge ``status`` into the job's status; a job gone meanwhile has nothing to report on."""
    async with api.write():
        try:
            await asyncio.to_thread(
                api.custom.patch_namespaced_custom_object_status,
                JOBS[0],
                JOBS[1],
                namespace,
                JOBS[2],
                name,
                {"status": status},
            )
        except ApiException as error:
            if error.status != 404:
                raise


class Created(NamedTuple):
    """What a create answered: the uid of the pod this call created and its resourceVersion,
    or the API server's reason for refusing it. An existing pod of that name (an earlier
    reconcile's or operator's) gives neither."""

    uid: str | None
    refusal: str | None
    version: str = ""


async def create_pod(api: Api, pod: dict[str, Any]) -> Created:
    """Create ``pod`` (see :class:`Created` for the answer)."""
    async with api.write():
        try:
            # Raw responses: parsing 1 000 full V1Pod models would cost more than the calls.
            response: Any = await asyncio.to_thread(
                api.core.create_namespaced_pod, pod["metadata"]["namespace"], cast(Any, pod), _preload_content=False
            )
        except ApiException as error:
            if error.status == 409:
                return Created(None, None)
            if error.status is not None and error.status >= 500:
                raise  # the server's trouble, not the pod's: the reconcile fails and runs again
            return Created(None, refusal_reason(error))  # quota, admission, an invalid field: worth an Event
    metrics.PODS_CREATED.inc()
    metadata = json.loads(response.data).get("metadata", {})
    return Created(str(metadata.get("uid", "")), None, str(metadata.get("resourceVersion", "")))


def refusal_reason(error: ApiException) -> str:
    """The ``message`` of a Kubernetes Status body (what kubectl shows), else the HTTP reason."""
    try:
        message = json.loads(error.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or f"HTTP {error.status} {error.reason}")


async def delete_pod(api: Api, namespace: str, name: str, uid: str | None, grace: int, why: str) -> None:
    """Delete pod ``name``, only if it is still the pod ``uid`` (when given): a pod
    already gone, or replaced meanwhile, is no error."""
    async with api.write():
        try:
            await asyncio.to_thread(
                api.core.delete_namespaced_pod,
                name,
                namespace,
                grace_period_seconds=grace,
                body=k8s.V1DeleteOptions(
                    grace_period_seconds=grace,
                    preconditions=k8s.V1Preconditions(uid=uid) if uid is not None else None,
                ),
                _preload_content=False,
            )
        except ApiException as error:
            if error.status not in (404, 409):
                raise
    metrics.PODS_DELETED.labels(why=why.split(";")[0]).inc()
    log.info("deleted pod %s/%s: %s", namespace, name, why)


async def _create_or_patch(
    api: Api, obj: dict[str, Any], create: Callable[..., Any], patch: Callable[..., Any], change: dict[str, Any]
) -> str | None:
    """Create ``obj``, or send it ``change`` (a merge patch) where one of that name exists; the
    API server's reason when it refuses (None: done). A 5xx is raised (kopf retries)."""
    namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    async with api.write():
        try:
            try:
                await asyncio.to_thread(create, namespace, cast(Any, obj), _preload_content=False)
            except ApiException as error:
                if error.status != 409:
                    raise
                await asyncio.to_thread(patch, name, namespace, change, _preload_content=False)
        except ApiException as error:
            if error.status is not None and error.status >= 500:
                raise
            return refusal_reason(error)
    return None


async def apply_pdb(api: Api, pdb: dict[str, Any]) -> str | None:
    """Create the PodDisruptionBudget ``pdb``, or patch its spec where one of that name
    exists; the API server's reason when it refuses (None: done)."""
    refusal = await _create_or_patch(
        api, pdb, api.policy.create_namespaced_pod_disruption_budget,
        api.policy.patch_namespaced_pod_disruption_budget, {"spec": pdb["spec"]},
    )  # fmt: skip
    if refusal is None:
        log.info("PodDisruptionBudget %s/%s: %s", pdb["metadata"]["namespace"], pdb["metadata"]["name"], pdb["spec"])
    return refusal


async def apply_service(api: Api, service: dict[str, Any]) -> str | None:
    """Create the Service ``service``, or patch its ports and selector where one of that name
    exists; the API server's reason when it refuses (None: done)."""
    change = {"spec": {"selector": service["spec"]["selector"], "ports": service["spec"]["ports"]}}
    refusal = await _create_or_patch(
        api, service, api.core.create_namespaced_service, api.core.patch_namespaced_service, change
    )
    if refusal is None:
        log.info("Service %s/%s: %s", service["metadata"]["namespace"], service["metadata"]["name"], service["spec"])
    return refusal


async def apply_network_policy(api: Api, policy: dict[str, Any]) -> str | None:
    """Create the NetworkPolicy ``policy``, or patch its spec where one of that name exists;
    the API server's reason when it refuses (None: done)."""
    networking = api.networking
    if networking is None:
        return "no networking.k8s.io client"
    refusal = await _create_or_patch(
        api, policy, networking.create_namespaced_network_policy, networking.patch_namespaced_network_policy,
        {"spec": policy["spec"]},
    )  # fmt: skip
    if refusal is None:
        log.info("NetworkPolicy %s/%s: %s", policy["metadata"]["namespace"], policy["metadata"]["name"], policy["spec"])
    return refusal


async def apply_secret(api: Api, secret: dict[str, Any]) -> str | None:
    """Create the Secret ``secret``, or patch its data where one of that name exists (never
    logged: only its name); the API server's reason when it refuses (None: done)."""
    refusal = await _create_or_patch(
        api, secret, api.core.create_namespaced_secret, api.core.patch_namespaced_secret,
        {"stringData": secret["stringData"]},
    )  # fmt: skip
    if refusal is None:
        log.info("Secret %s/%s applied", secret["metadata"]["namespace"], secret["metadata"]["name"])
    return refusal


async def read_secret_value(api: Api, namespace: str, name: str, key: str) -> str | None:
    """The decoded value of ``key`` in Secret ``name``; None when it, or the Secret, is
    missing or not readable (a caller that merely wants it does without)."""
    try:
        secret = await asyncio.to_thread(api.core.read_namespaced_secret, name, namespace)
    except ApiException:
        return None
    raw = (secret.data or {}).get(key)
    return base64.b64decode(raw).decode() if raw else None


def post_event(job_metadata: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """An Event about the RolloutJob (kopf posts it in the background)."""
    target = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": job_metadata}
    kopf.event(cast(kopf.Body, target), type=type_, reason=reason, message=message)

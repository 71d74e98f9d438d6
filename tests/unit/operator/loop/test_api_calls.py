"""The thin API calls: what each sends, and how each reads the server's answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from rolloutfleet_operator.loop.api_calls import (
    JOBS,
    create_pod,
    delete_pod,
    patch_status,
    post_event,
    read_secret_value,
    refusal_reason,
)


def pod(name: str = "cp-worker-0") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"}, "spec": {}}


@pytest.mark.asyncio
async def test_a_created_pod_gives_its_uid_and_counts(kube: Any) -> None:
    before = REGISTRY.get_sample_value("rolloutfleet_operator_pods_created_total") or 0.0
    uid, refusal, version = await create_pod(kube.api(), pod())
    assert uid == kube.pods["cp-worker-0"]["metadata"]["uid"] and refusal is None
    assert version == kube.pods["cp-worker-0"]["metadata"]["resourceVersion"]
    (call,) = kube.named("create_namespaced_pod")
    assert call["namespace"] == "team" and call["body"] == pod()
    assert call["_preload_content"] is False  # raw answers: no V1Pod models parsed
    assert REGISTRY.get_sample_value("rolloutfleet_operator_pods_created_total") == before + 1


@pytest.mark.asyncio
async def test_a_pod_that_exists_already_is_neither_created_nor_refused(kube: Any) -> None:
    kube.fail("create_namespaced_pod", 409, "already exists")
    assert await create_pod(kube.api(), pod()) == (None, None, "")


@pytest.mark.asyncio
async def test_a_refusal_gives_the_servers_words(kube: Any) -> None:
    quota = 'pods "cp-worker-0" is forbidden: exceeded quota: workers'
    kube.fail("create_namespaced_pod", 403, quota)
    assert await create_pod(kube.api(), pod()) == (None, quota, "")
    kube.fail("create_namespaced_pod", 422, None, reason="Unprocessable Entity")
    assert await create_pod(kube.api(), pod()) == (None, "HTTP 422 Unprocessable Entity", "")


@pytest.mark.asyncio
async def test_a_server_error_is_raised_not_reported_as_the_pods_fault(kube: Any) -> None:
    kube.fail("create_namespaced_pod", 503, "etcd is away")
    with pytest.raises(ApiException):
        await create_pod(kube.api(), pod())


def test_refusal_reason_survives_a_body_that_is_not_a_status() -> None:
    assert refusal_reason(ApiException(status=400, reason="Bad Request", body="<html>")) == "HTTP 400 Bad Request"
    assert refusal_reason(ApiException(status=400, reason="Bad Request", body='["a list"]')) == "HTTP 400 Bad Request"


@pytest.mark.asyncio
async def test_a_delete_is_of_that_pod_only_with_the_given_grace(kube: Any) -> None:
    await delete_pod(kube.api(), "team", "cp-worker-1", "uid-1", 0, "failed; replacing it")
    await delete_pod(kube.api(), "team", "cp-worker-2", None, 30, "scaled down")
    first, second = kube.named("delete_namespaced_pod")
    assert (first["name"], first["namespace"], first["grace_period_seconds"]) == ("cp-worker-1", "team", 0)
    assert first["body"].grace_period_seconds == 0 and first["body"].preconditions.uid == "uid-1"
    assert second["grace_period_seconds"] == 30 and second["body"].preconditions is None
    counted = REGISTRY.get_sample_value("rolloutfleet_operator_pods_deleted_total", {"why": "failed"})
    assert counted is not None and counted >= 1  # labelled by the reason before its details


@pytest.mark.parametrize("status", [404, 409])
@pytest.mark.asyncio
async def test_a_pod_gone_or_replaced_meanwhile_is_no_error(kube: Any, status: int) -> None:
    kube.fail("delete_namespaced_pod", status)
    await delete_pod(kube.api(), "team", "cp-worker-1", "uid-1", 30, "scaled down")


@pytest.mark.asyncio
async def test_other_delete_errors_are_raised(kube: Any) -> None:
    kube.fail("delete_namespaced_pod", 403, "forbidden")
    with pytest.raises(ApiException):
        await delete_pod(kube.api(), "team", "cp-worker-1", "uid-1", 30, "scaled down")


@pytest.mark.asyncio
async def test_a_status_is_merged_into_the_jobs_status_subresource(kube: Any) -> None:
    await patch_status(kube.api(), "team", "cp", {"phase": "Running"})
    (call,) = kube.named("patch_status")
    assert call == {"resource": JOBS, "namespace": "team", "name": "cp", "body": {"status": {"phase": "Running"}}}
    kube.fail("patch_status", 404)  # the job is gone: nothing to report on
    await patch_status(kube.api(), "team", "cp", {"phase": "Running"})
    kube.fail("patch_status", 500)
    with pytest.raises(ApiException):
        await patch_status(kube.api(), "team", "cp", {"phase": "Running"})


@pytest.mark.asyncio
async def test_a_secret_value_is_decoded_and_missing_is_none(kube: Any) -> None:
    kube.secrets[("team", "redis-auth")] = {"password": "s3cret"}
    assert await read_secret_value(kube.api(), "team", "redis-auth", "password") == "s3cret"
    assert await read_secret_value(kube.api(), "team", "redis-auth", "other") is None
    assert await read_secret_value(kube.api(), "team", "nope", "password") is None


@pytest.mark.asyncio
async def test_calls_in_flight_are_bounded_by_the_slots(kube: Any) -> None:
    kube.delay_s = 0.05
    api = kube.api(slots=2)
    await asyncio.gather(*(create_pod(api, pod(f"cp-worker-{i}")) for i in range(6)))
    assert len(kube.pods) == 6 and kube.most_in_flight == 2


def test_an_event_is_about_the_rolloutjob(posted: list[dict[str, Any]]) -> None:
    metadata = {"name": "cp", "namespace": "team", "uid": "u1"}
    post_event(metadata, "Warning", "CreateFailed", "refused")
    (event,) = posted
    assert event["object"] == {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": metadata}
    assert (event["type"], event["reason"], event["message"]) == ("Warning", "CreateFailed", "refused")

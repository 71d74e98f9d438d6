"""An external env's Service: what it selects and exposes, and how a reconcile keeps it."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import build_pod, build_service, job_labels
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.reconcile import reconcile
from rolloutfleet_operator.loop.runtime import Runtime
from tests.unit.operator.loop.test_reconcile import KEY, indexed_job

EXTERNAL = {"id": "CartPole-v1", "external": {"port": 9911}}


def test_the_service_selects_the_jobs_workers_on_the_external_port() -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "team"}, "spec": {"env": EXTERNAL}})
    service = build_service(job, "job-uid")
    assert service is not None
    assert service["metadata"]["name"] == "cp-external"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert service["spec"]["selector"] == job_labels("cp")
    assert service["spec"]["ports"] == [{"name": "external", "port": 9911, "targetPort": "external", "protocol": "TCP"}]
    # the selector picks the job's worker pods, which name the port the Service targets
    pod = build_pod(job, "job-uid", 0, OperatorConfig(), "hash")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    assert {"name": "external", "containerPort": 9911, "protocol": "TCP"} in container["ports"]


def test_a_job_stepping_its_own_envs_has_no_service_and_no_external_port() -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1"}}})
    assert build_service(job, "uid") is None
    (container,) = build_pod(job, "uid", 0, OperatorConfig(), "hash")["spec"]["containers"]
    assert [port["name"] for port in container["ports"]] == ["metrics"]


@pytest.mark.asyncio
async def test_the_service_is_applied_once_then_again_when_the_port_changes(kube: Any, posted: list[Any]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(env=EXTERNAL)
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    (created,) = [call["body"] for call in kube.named("create_service")]
    assert created["metadata"]["name"] == "cp-external" and created["spec"]["ports"][0]["port"] == 9911
    kube.calls.clear()
    for _ in range(3):
        await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    assert not kube.named("create_service") and not kube.named("patch_service")
    job["spec"]["env"] = {"id": "CartPole-v1", "external": {"port": 9912}}
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    assert [p["body"]["spec"]["ports"][0]["port"] for p in kube.named("patch_service")] == [9912]
    assert kube.services["cp-external"]["spec"]["ports"][0]["port"] == 9912


@pytest.mark.asyncio
async def test_a_refused_service_is_reported_once_and_tried_again(kube: Any, posted: list[Any]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(env=EXTERNAL)
    kube.fail("create_service", 403, 'services is forbidden: User "op" cannot create resource "services"')
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})  # not at every round
    runtime.job(KEY).service.sent = None  # as if PDB_RETRY_S had passed
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    assert len(kube.named("create_service")) == 2
    warnings = [e for e in posted if e["reason"] == "ServiceFailed"]
    assert len(warnings) == 1 and "forbidden" in warnings[0]["message"]
    kube.recover("create_service")
    runtime.job(KEY).service.sent = None
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []})
    assert "cp-external" in kube.services

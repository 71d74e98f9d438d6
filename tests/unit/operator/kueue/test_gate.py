"""One reconcile of a Kueue-queued job against recorded API calls: no pod without an
admitted Workload, Kueue missing or down said in the status, the admitted flavor applied."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import JOB_LABEL, build_pod, owner_reference, template_hash
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.kueue import admission as kueue
from rolloutfleet_operator.loop.reconcile import reconcile
from rolloutfleet_operator.loop.runtime import Runtime
from tests.unit.operator.conftest import FakeKube, _api_error

KEY = ("team", "cp")
SPEC = {"replicas": 2, "env": {"id": "CartPole-v1"}, "resources": {"cpu": "250m", "memory": "256Mi"}}


class KueueKube(FakeKube):
    """FakeKube with the custom-object calls of Kueue's Workloads and flavors."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster_objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.workloads: dict[str, dict[str, Any]] = {}

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, body: Any) -> Any:
        self._call("create_workload", namespace=namespace, body=body)
        self.workloads[body["metadata"]["name"]] = body
        return body

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> Any:
        self._call("delete_workload", namespace=namespace, name=name)
        return {}

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any:
        self._call("get_cluster_object", plural=plural, name=name)
        if (plural, name) not in self.cluster_objects:
            raise _api_error(404, f'{plural}.kueue.x-k8s.io "{name}" not found')
        return self.cluster_objects[(plural, name)]


@pytest.fixture
def kueue_kube() -> KueueKube:
    return KueueKube()


def indexed_job(labels: dict[str, str]) -> dict[str, Any]:
    meta = {"name": "cp", "namespace": "team", "uid": "job-uid", "generation": 1, "labels": labels}
    return {"metadata": {**meta, "deletionTimestamp": None}, "spec": dict(SPEC), "status": {}}


def wanted_workload(config: OperatorConfig) -> dict[str, Any]:
    job = RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "team"}, "spec": SPEC})
    pod = build_pod(job, "job-uid", 0, config, template_hash(job, config))
    return kueue.build_workload(
        "cp", "team", "job-uid", {kueue.QUEUE_LABEL: "q"}, 2, pod, None, owner_reference(job, "job-uid"), JOB_LABEL
    )


async def run(kube: KueueKube, job: dict[str, Any], workloads: list[dict[str, Any]] | None = None) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, {KEY: workloads or []})


@pytest.mark.asyncio
async def test_without_kueue_installed_a_queued_job_says_so_and_starts_no_pod(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    kueue_kube.fail("create_workload", 404)  # no Status body: "404 page not found", as a real server answers
    job = indexed_job({kueue.QUEUE_LABEL: "q"})
    await run(kueue_kube, job)
    assert kueue_kube.named("create_namespaced_pod") == []
    assert job["status"]["phase"] == "Queued" and job["status"]["reason"] == "KueueNotInstalled"
    assert "RolloutJob.v1alpha1.rolloutfleet.io" in job["status"]["message"]


@pytest.mark.asyncio
async def test_with_kueue_down_its_webhook_refuses_the_workload_and_no_pod_starts(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    refusal = 'Internal error occurred: failed calling webhook "mworkload.kb.io": connection refused'
    kueue_kube.fail("create_workload", 500, refusal)
    job = indexed_job({kueue.QUEUE_LABEL: "q"})
    await run(kueue_kube, job)
    assert kueue_kube.named("create_namespaced_pod") == []
    assert job["status"]["reason"] == "WorkloadRefused" and "failed calling webhook" in job["status"]["message"]


@pytest.mark.asyncio
async def test_a_created_but_unadmitted_workload_keeps_the_job_queued(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    job = indexed_job({kueue.QUEUE_LABEL: "q"})
    await run(kueue_kube, job)
    (created,) = kueue_kube.named("create_workload")
    assert created["body"]["spec"]["podSets"][0]["count"] == 2
    assert kueue_kube.named("create_namespaced_pod") == [] and job["status"]["phase"] == "Queued"
    assert [e["reason"] for e in posted] == ["WorkloadCreated"]


@pytest.mark.asyncio
async def test_an_admitted_workload_lets_the_pods_start_on_its_flavor(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    workload = wanted_workload(OperatorConfig())
    admission = {"clusterQueue": "cq", "podSetAssignments": [{"name": "workers", "flavors": {"cpu": "spot"}}]}
    conditions = [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]
    workload["status"] = {"admission": admission, "conditions": conditions}
    workload["metadata"]["resourceVersion"] = "7"
    toleration = {"key": "spot", "operator": "Exists"}
    kueue_kube.cluster_objects[("resourceflavors", "spot")] = {
        "spec": {"nodeLabels": {"pool": "spot"}, "tolerations": [toleration]}
    }
    await run(kueue_kube, indexed_job({kueue.QUEUE_LABEL: "q"}), [workload])
    assert kueue_kube.named("create_workload") == []
    pods = [call["body"] for call in kueue_kube.named("create_namespaced_pod")]
    assert len(pods) == 2
    assert all(
        p["spec"]["nodeSelector"] == {"pool": "spot"} and p["spec"]["tolerations"][-1] == toleration for p in pods
    )
    # No worker is ready yet: the Workload says so (PodsReady False, WaitForStart).
    (patch,) = kueue_kube.named("patch_status")[:1]
    assert patch["name"] == workload["metadata"]["name"] and patch["body"]["metadata"]["resourceVersion"] == "7"
    assert [c["reason"] for c in patch["body"]["status"]["conditions"] if c["type"] == "PodsReady"] == ["WaitForStart"]


@pytest.mark.asyncio
async def test_a_missing_workload_priority_class_is_named_and_nothing_is_created(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    job = indexed_job({kueue.QUEUE_LABEL: "q", kueue.PRIORITY_LABEL: "urgent"})
    await run(kueue_kube, job)
    assert kueue_kube.named("create_workload") == [] and kueue_kube.named("create_namespaced_pod") == []
    assert job["status"]["reason"] == "PriorityClassNotFound" and "urgent" in job["status"]["message"]


@pytest.mark.asyncio
async def test_a_job_without_the_queue_label_never_touches_kueue(
    kueue_kube: KueueKube, posted: list[dict[str, Any]]
) -> None:
    await run(kueue_kube, indexed_job({}))
    assert kueue_kube.named("create_workload") == [] and len(kueue_kube.named("create_namespaced_pod")) == 2

"""The kopf handlers against kmock, the kopf author's in-memory Kubernetes API.

The operator runs for real (kopf's watches, indexes, timer; our reconcile and its API
calls through the ``kubernetes`` client) against an emulated API server. The facts
asserted are the server's: which objects exist, which requests reached it, what the
status and Events say. Schemas, RBAC, owner-reference GC and real pods are the e2e tier's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import kmock
import kopf
import kubernetes.config.kube_config
import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import build_pod, template_hash
from rolloutfleet_operator.config import OperatorConfig

NS = "team-a"
JOBS_URL = f"/apis/rolloutfleet.io/v1alpha1/namespaces/{NS}/rolloutjobs"
PODS_URL = f"/api/v1/namespaces/{NS}/pods"
EVENTS_URL = f"/api/v1/namespaces/{NS}/events"


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    """kmock's emulator, plus what the real API server stamps on a new object (a uid,
    a creation time, a generation for custom resources): the operator relies on them.
    ``refuse_pods``: answer pod creations 403 with this message, as a ResourceQuota would."""

    refuse_pods: str | None = None

    async def _handle(self, request: kmock.Request) -> Any:
        if self.refuse_pods and request.action == kmock.action.CREATE and request.url.path == PODS_URL:
            raise kmock.KubernetesError(status=403, reason="Forbidden", message=self.refuse_pods)
        if request.action == kmock.action.CREATE and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            metadata.setdefault("namespace", request.namespace)
            metadata.setdefault("resourceVersion", "1")  # kopf's JSON patches test it
            if "name" not in metadata and "generateName" in metadata:  # kopf's Events
                metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:8]
            if request.resource is not None and request.resource.group == "rolloutfleet.io":
                metadata.setdefault("generation", 1)
        return await super()._handle(request)


pytestmark = [pytest.mark.asyncio, pytest.mark.slow, pytest.mark.kmock(cls=Emulator)]


def declare_resources(server: Any) -> None:
    server.resources["rolloutfleet.io/v1alpha1/rolloutjobs"] = kmock.ResourceInfo(
        kind="RolloutJob",
        singular="rolloutjob",
        namespaced=True,
        verbs={"get", "list", "watch", "patch", "create", "delete"},
        subresources={"status", "scale"},
    )
    server.resources["v1/pods"] = kmock.ResourceInfo(
        kind="Pod", singular="pod", namespaced=True, verbs={"get", "list", "watch", "create", "delete", "patch"}
    )
    server.resources["policy/v1/poddisruptionbudgets"] = kmock.ResourceInfo(
        kind="PodDisruptionBudget",
        singular="poddisruptionbudget",
        namespaced=True,
        verbs={"list", "watch", "create", "patch"},
    )
    server.resources["v1/events"] = kmock.ResourceInfo(
        kind="Event", singular="event", namespaced=True, verbs={"create", "list"}
    )
    # kopf's backbone: it waits until these are discovered, even when it doesn't watch them.
    server.resources["v1/namespaces"] = kmock.ResourceInfo(
        kind="Namespace", singular="namespace", namespaced=False, verbs={"list", "watch"}
    )
    server.resources["apiextensions.k8s.io/v1/customresourcedefinitions"] = kmock.ResourceInfo(
        kind="CustomResourceDefinition", singular="customresourcedefinition", namespaced=False, verbs={"list", "watch"}
    )


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"replicas": 3, "env": {"id": "CartPole-v1"}}
    body.update(spec)
    return {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


@pytest.fixture
def server(kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    declare_resources(kmock)
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url).rstrip("/")}}],
        "users": [{"name": "test", "user": {"token": "kmock"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "test"}}],
        "current-context": "kmock",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(path))
    # The client reads $KUBECONFIG once, at import: point its default there too.
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    # No Redis in these tests: progress reading (and its Secret reads) is off.
    monkeypatch.setenv("ROLLOUTFLEET_READ_PROGRESS", "0")
    return kmock


Runner = Callable[[], contextlib.AbstractAsyncContextManager[None]]


@pytest.fixture
def operator(server: Any) -> Runner:
    """``async with operator(): ...`` runs the operator (standalone) for the block."""
    import rolloutfleet_operator.handlers  # noqa: F401 - registers the handlers

    @contextlib.asynccontextmanager
    async def run() -> AsyncIterator[None]:
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(
            kopf.operator(clusterwide=True, standalone=True, stop_flag=stop, ready_flag=ready, memo=kopf.Memo())
        )
        await asyncio.wait_for(ready, timeout=10)
        try:
            yield
        finally:
            stop.set_result(None)
            await asyncio.wait_for(task, timeout=15)

    return run


async def get(server: Any, url: str) -> Any:
    async with server.get(url) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def send(server: Any, method: str, url: str, body: dict[str, Any]) -> Any:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "patch" else {}
    async with server.request(method.upper(), url, json=body, headers=headers) as response:
        assert response.status in (200, 201), await response.text()
        return await response.json()


async def pods(server: Any) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in (await get(server, PODS_URL))["items"]}


async def events(server: Any) -> list[dict[str, Any]]:
    return list((await get(server, EVENTS_URL))["items"])


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    """Poll ``check`` until it returns something truthy; its last error says what was missing."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            result = await check()
            if result:
                return result
            failure: BaseException = AssertionError(f"still {result!r}")
        except AssertionError as error:
            failure = error
        if asyncio.get_running_loop().time() > deadline:
            raise failure
        await asyncio.sleep(0.1)


def requests(server: Any, method: str, path: str) -> int:
    """How many ``method`` requests for ``path`` reached the server (iterating kmock yields its requests)."""
    return sum(1 for r in server if r.method.value == method and r.url.path == path)


def pod_creations(server: Any) -> int:
    return requests(server, "POST", PODS_URL)


def pod_deletions(server: Any, name: str) -> int:
    return requests(server, "DELETE", f"{PODS_URL}/{name}")


async def fail_pod(server: Any, name: str, exit_code: int, message: str) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    terminated = {"exitCode": exit_code, "reason": "Error", "message": message, "startedAt": now, "finishedAt": now}
    container = {
        "name": "worker",
        "image": "worker",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }
    status = {"phase": "Failed", "containerStatuses": [container]}
    await send(server, "patch", f"{PODS_URL}/{name}/status", {"status": status})


async def test_a_new_job_gets_its_indexed_owned_pods_once_and_a_status(server: Any, operator: Runner) -> None:
    async with operator():
        job = await send(server, "post", JOBS_URL, job_manifest("cp", replicas=3))

        async def three_pods() -> dict[str, dict[str, Any]]:
            found = await pods(server)
            assert set(found) == {"cp-worker-0", "cp-worker-1", "cp-worker-2"}, sorted(found)
            return found

        found = await eventually(three_pods)

        async def status() -> dict[str, Any]:
            current = (await get(server, f"{JOBS_URL}/cp")).get("status") or {}
            assert current.get("replicas") == 3, current
            return current

        current = await eventually(status)
        await asyncio.sleep(1.0)  # pod ADDED events and the status patch's own event arrive meanwhile
        assert pod_creations(server) == 3  # every trigger after the first found nothing to create
        posted = await events(server)
        # Settled: neither the status patch's own event nor the timer patches it again.
        patches = requests(server, "PATCH", f"{JOBS_URL}/cp/status")
        await asyncio.sleep(1.5)
        assert requests(server, "PATCH", f"{JOBS_URL}/cp/status") == patches
    for name, pod in found.items():
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("RolloutJob", "cp", job["metadata"]["uid"])
        assert pod["metadata"]["labels"]["rolloutfleet.io/worker-index"] == name.rsplit("-", 1)[1]
    assert current["phase"] == "Pending" and current["readyReplicas"] == 0 and current["observedGeneration"] == 1
    assert current["selector"] == (
        "app.kubernetes.io/component=worker,app.kubernetes.io/managed-by=rolloutfleet-operator,"
        "app.kubernetes.io/name=rolloutfleet,rolloutfleet.io/job=cp"
    )
    assert {c["type"]: c["status"] for c in current["conditions"]} == {
        "Ready": "False",
        "Degraded": "False",
        "Failed": "False",
        "RedisIsolated": "False",  # no admin credential of its Redis: the shared password, said so
    }
    assert any(e["reason"] == "CreatedWorkers" for e in posted)


async def test_a_failed_worker_is_counted_once_and_replaced_with_its_reason_in_an_event(
    server: Any, operator: Runner
) -> None:
    policy = {"maxRestarts": 5, "backoffSeconds": 0, "backoffLimitSeconds": 0}
    reason = "spec.env.id: 'Nope-v0' is not a registered gymnasium environment"
    async with operator():
        await send(server, "post", JOBS_URL, job_manifest("cp", replicas=2, restartPolicy=policy))
        first = await eventually(lambda: _pod_uid(server, "cp-worker-1"))
        await fail_pod(server, "cp-worker-1", exit_code=3, message=f"Traceback...\n{reason}\n")

        async def replaced() -> str | None:
            uid = await _pod_uid(server, "cp-worker-1")
            return uid if uid not in (None, first) else None

        await eventually(replaced)
        await asyncio.sleep(1.0)  # further events of the old and new pod must not recount it
        status = (await get(server, f"{JOBS_URL}/cp"))["status"]
        posted = await events(server)
    assert status["restarts"] == 1
    record = status["workers"]["1"]
    assert (record["restarts"], record["lastExitCode"], record["lastFailedPod"]) == (1, 3, first)
    assert reason in record["lastError"]
    assert pod_deletions(server, "cp-worker-1") == 1 and pod_deletions(server, "cp-worker-0") == 0
    warnings = [e for e in posted if e["reason"] == "WorkerFailed"]
    assert len(warnings) == 1 and reason in warnings[0]["message"] and warnings[0]["type"] == "Warning"


async def test_a_spent_budget_fails_the_job_and_keeps_the_failed_pod(server: Any, operator: Runner) -> None:
    async with operator():
        await send(server, "post", JOBS_URL, job_manifest("cp", replicas=1, restartPolicy={"maxRestarts": 0}))
        await eventually(lambda: _pod_uid(server, "cp-worker-0"))
        await fail_pod(server, "cp-worker-0", exit_code=1, message="boom")

        async def failed() -> dict[str, Any]:
            status = (await get(server, f"{JOBS_URL}/cp")).get("status") or {}
            assert status.get("phase") == "Failed", status.get("phase")
            return status

        status = await eventually(failed)
        await asyncio.sleep(0.5)
        remaining = await pods(server)
        posted = await events(server)
    assert status["reason"] == "RestartBudgetExhausted" and status["workers"]["0"]["down"] is True
    assert {c["type"]: c["status"] for c in status["conditions"]}["Failed"] == "True"
    assert remaining["cp-worker-0"]["status"]["phase"] == "Failed"  # kept for `kubectl logs`
    assert pod_creations(server) == 1
    assert any(e["reason"] == "RestartBudgetExhausted" for e in posted)


async def test_scale_down_removes_the_highest_indexes_and_suspend_removes_all(server: Any, operator: Runner) -> None:
    async with operator():
        await send(server, "post", JOBS_URL, job_manifest("cp", replicas=4))
        await eventually(lambda: _names_are(server, {f"cp-worker-{i}" for i in range(4)}))
        await send(server, "patch", f"{JOBS_URL}/cp", {"spec": {"replicas": 2}, "metadata": {"generation": 2}})
        await eventually(lambda: _names_are(server, {"cp-worker-0", "cp-worker-1"}))
        assert pod_deletions(server, "cp-worker-3") == pod_deletions(server, "cp-worker-2") == 1
        await send(server, "patch", f"{JOBS_URL}/cp", {"spec": {"suspend": True}, "metadata": {"generation": 3}})
        await eventually(lambda: _names_are(server, set()))

        async def suspended() -> bool:
            status = (await get(server, f"{JOBS_URL}/cp")).get("status") or {}
            return status.get("phase") == "Suspended" and status.get("observedGeneration") == 3

        await eventually(suspended)
        await send(server, "patch", f"{JOBS_URL}/cp", {"spec": {"suspend": False}, "metadata": {"generation": 4}})
        await eventually(lambda: _names_are(server, {"cp-worker-0", "cp-worker-1"}))
    assert pod_creations(server) == 4 + 2


async def test_an_unusable_spec_is_reported_in_status_and_an_event_without_pods(server: Any, operator: Runner) -> None:
    # Both an id and an entry point: the CRD's CEL rule refuses this on a real server;
    # kmock stores it, so the operator's own check is what answers.
    bad = job_manifest("cp", env={"id": "CartPole-v1", "entryPoint": "pkg.mod:make"})
    async with operator():
        await send(server, "post", JOBS_URL, bad)

        async def reported() -> dict[str, Any]:
            status = (await get(server, f"{JOBS_URL}/cp")).get("status") or {}
            assert status.get("reason") == "InvalidSpec", status
            return status

        status = await eventually(reported)
        await asyncio.sleep(0.5)
        posted = await events(server)
    assert status["phase"] == "Failed" and "spec.env" in status["message"]
    assert pod_creations(server) == 0
    invalid = [e for e in posted if e["reason"] == "InvalidSpec"]
    assert len(invalid) == 1 and "spec.env" in invalid[0]["message"]


async def test_a_restarted_operator_creates_no_duplicates_and_keeps_restart_counts(
    server: Any, operator: Runner
) -> None:
    # What an earlier operator left behind: a job whose worker 1 restarted twice, and its pods.
    manifest = job_manifest("cp", replicas=3)
    created = await send(server, "post", JOBS_URL, manifest)
    record = {"restarts": 2, "consecutiveFailures": 0, "restartAt": None, "down": False, "lastFailedPod": "old"}
    await send(server, "patch", f"{JOBS_URL}/cp/status", {"status": {"restarts": 2, "workers": {"1": record}}})
    config = OperatorConfig.from_environ({})
    job = RolloutJob.from_dict(manifest)
    for index in range(3):
        pod = build_pod(job, created["metadata"]["uid"], index, config, template_hash(job, config))
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        await send(server, "post", PODS_URL, pod)
    before = pod_creations(server)

    async with operator():

        async def running() -> dict[str, Any]:
            status = (await get(server, f"{JOBS_URL}/cp")).get("status") or {}
            assert status.get("phase") == "Running", status
            return status

        status = await eventually(running)
        await asyncio.sleep(1.0)
    assert pod_creations(server) == before and not any(r.method.value == "DELETE" for r in server)
    assert status["restarts"] == 2 and status["workers"]["1"]["restarts"] == 2 and status["readyReplicas"] == 3


async def test_refused_creations_stop_early_and_are_reported_once(server: Any, operator: Runner) -> None:
    quota = 'pods "cp-worker-0" is forbidden: exceeded quota: workers, requested: pods=1, used: pods=0, limited: pods=0'
    server.refuse_pods = quota
    async with operator():
        await send(server, "post", JOBS_URL, job_manifest("cp", replicas=50))

        async def refused() -> list[dict[str, Any]]:
            return [e for e in await events(server) if e["reason"] == "CreateFailed"]

        reported = await eventually(refused)
        await asyncio.sleep(1.0)
        attempts = pod_creations(server)
        again = await refused()
        server.refuse_pods = None  # the quota is raised: the next reconcile (timer) creates them all
        await eventually(lambda: _names_are(server, {f"cp-worker-{i}" for i in range(50)}), timeout=60)
    # Slow start: one refused pod per reconcile, not fifty; one Event per distinct reason.
    assert 1 <= attempts <= 3
    assert len(again) == 1 and quota in reported[0]["message"] and reported[0]["type"] == "Warning"


async def _pod_uid(server: Any, name: str) -> str | None:
    pod = (await pods(server)).get(name)
    return None if pod is None else str(pod["metadata"]["uid"])


async def _names_are(server: Any, names: set[str]) -> bool:
    found = set(await pods(server))
    assert found == names, sorted(found)
    return True


async def test_the_job_handler_returns_before_the_rounds_and_a_failed_round_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """kopf adds its finalizer after the job's handler returns (a JSON patch testing the
    event's resourceVersion) and holds the job's next events until then: the handler must
    not run the rounds itself (a 10 000-pod start's status patches made 44 such patches fail)."""
    from types import SimpleNamespace

    from rolloutfleet_operator import handlers
    from rolloutfleet_operator.loop.runtime import Runtime

    release, started = asyncio.Event(), asyncio.Event()

    async def slow_round(*args: Any) -> None:
        started.set()
        await release.wait()

    monkeypatch.setattr(handlers, "reconcile", slow_round)
    memo = SimpleNamespace(runtime=Runtime(config=OperatorConfig(), api=Any))
    indexes: dict[str, Any] = {"job_index": {}, "pod_index": {}, "workload_index": {}, "pdb_index": {}}
    await asyncio.wait_for(handlers.job_changed(type="ADDED", namespace=NS, name="cp", memo=memo, **indexes), 10)
    await asyncio.wait_for(started.wait(), 10)  # the round runs, the handler has returned
    release.set()
    await asyncio.gather(*handlers._BACKGROUND)

    async def failing_round(*args: Any) -> None:
        raise RuntimeError("the API server went away")

    monkeypatch.setattr(handlers, "reconcile", failing_round)
    await handlers.job_changed(type="MODIFIED", namespace=NS, name="cp", memo=memo, **indexes)
    await asyncio.gather(*handlers._BACKGROUND, return_exceptions=True)
    await asyncio.sleep(0)  # the done-callback runs after the task's awaiters
    assert "reconcile failed" in caplog.text and "the API server went away" in caplog.text
    assert not handlers._BACKGROUND

"""One reconcile, against recorded API calls: what it writes, deletes and creates, in
which order, and what it remembers for the next round."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet_operator.children.evaluators import evaluator_view
from rolloutfleet_operator.children.pods import PodView
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.reconcile import reconcile, shown
from rolloutfleet_operator.loop.runtime import Runtime

KEY = ("team", "cp")
NO_BACKOFF = {"maxRestarts": 5, "backoffSeconds": 0, "backoffLimitSeconds": 0}


def indexed_job(status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """A job as ``handlers.job_index`` keeps it."""
    return {
        "metadata": {"name": "cp", "namespace": "team", "uid": "job-uid", "generation": 1, "deletionTimestamp": None},
        "spec": {"replicas": 2, "env": {"id": "CartPole-v1"}, **spec},
        "status": dict(status or {}),
    }


def observed(kube: Any, name: str, phase: str = "Running", exit_code: int | None = None) -> PodView:
    """A pod the fake server holds, as ``handlers.pod_index`` would see it in ``phase``."""
    pod = dict(kube.pods[name])
    pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(phase == "Running")}]}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": "Error", "message": "boom"}
        pod["status"]["containerStatuses"] = [{"state": {"terminated": terminated}}]
    view = PodView.from_pod(pod)
    assert view is not None
    return view


def made(kube: Any) -> list[str]:
    return [call["body"]["metadata"]["name"] for call in kube.named("create_namespaced_pod")]


async def run(runtime: Runtime, job: dict[str, Any], pods: list[PodView]) -> float | None:
    return await reconcile(KEY, runtime, {KEY: [job]}, {KEY: pods})


@pytest.mark.asyncio
async def test_a_new_job_gets_its_pods_a_status_and_one_event(kube: Any, posted: list[dict[str, Any]]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(replicas=3)
    assert await run(runtime, job, []) is None
    assert [name for name, _ in kube.calls] == ["patch_status"] + ["create_namespaced_pod"] * 3 + ["create_pdb"]
    assert sorted(made(kube)) == ["cp-worker-0", "cp-worker-1", "cp-worker-2"]
    assert kube.pods["cp-worker-0"]["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert [(e["reason"], e["message"]) for e in posted] == [("CreatedWorkers", "created worker pod(s) 0, 1, 2")]
    assert job["status"]["phase"] == "Pending"  # the index entry holds what was written
    # The pods' own events trigger the next round before the watch shows them.
    kube.calls.clear()
    await run(runtime, job, [])
    assert kube.calls == [] and len(posted) == 1  # nothing created twice, the status unchanged


@pytest.mark.asyncio
async def test_a_failure_is_recorded_before_its_pod_is_deleted_and_counted_once(
    kube: Any, posted: list[dict[str, Any]]
) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(restartPolicy=NO_BACKOFF)
    await run(runtime, job, [])
    kube.calls.clear()
    pods = [observed(kube, "cp-worker-0"), observed(kube, "cp-worker-1", "Failed", exit_code=3)]
    await run(runtime, job, pods)
    assert [name for name, _ in kube.calls] == ["patch_status", "delete_namespaced_pod"]
    (status,) = [call["body"]["status"] for call in kube.named("patch_status")]
    assert status["workers"]["1"]["restarts"] == 1 and status["workers"]["1"]["lastFailedPod"] == pods[1].uid
    (delete,) = kube.named("delete_namespaced_pod")
    assert delete["name"] == "cp-worker-1" and delete["grace_period_seconds"] == 0  # nothing left to stop
    assert delete["body"].preconditions.uid == pods[1].uid
    assert [e["reason"] for e in posted[1:]] == ["WorkerFailed", "DeletedWorkers"]
    assert posted[-1]["message"] == "deleted worker pod(s) 1: failed; replacing it"
    # The watch still shows the failed pod: it is going away, not failed again.
    kube.calls.clear()
    await run(runtime, job, pods)
    assert kube.calls == [] and len(posted) == 3


@pytest.mark.asyncio
async def test_a_pod_deleted_by_someone_else_is_a_disruption_replaced_at_once(
    kube: Any, posted: list[dict[str, Any]]
) -> None:
    # Backoff and a budget of 1: a failure would wait and spend it; a disruption does neither.
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    job = indexed_job(restartPolicy={"maxRestarts": 1, "backoffSeconds": 60})
    await run(runtime, job, [])
    both = [observed(kube, "cp-worker-0"), observed(kube, "cp-worker-1")]
    await run(runtime, job, both)
    kube.calls.clear()
    await run(runtime, job, both[:1])  # someone else deleted worker 1 (kubectl delete pod)
    record = job["status"]["workers"]["1"]
    assert record["restarts"] == 0 and record["disruptions"] == 1 and record["lastDisruptedPod"] == both[1].uid
    assert job["status"]["restarts"] == 0 and job["status"]["disruptions"]["Deleted"] == 1
    assert made(kube) == ["cp-worker-1"] and not kube.named("delete_namespaced_pod")
    disrupted = [e for e in posted if e["reason"] == "WorkerDisrupted"]
    assert (
        len(disrupted) == 1
        and disrupted[0]["type"] == "Normal"
        and "worker(s) 1 disrupted (Deleted" in (disrupted[0]["message"])
    )


@pytest.mark.asyncio
async def test_a_pdb_is_created_once_and_left_alone_while_the_index_agrees(kube: Any, posted: list[Any]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(disruption={"maxUnavailable": 1})
    await run(runtime, job, [])
    (created,) = [call["body"] for call in kube.named("create_pdb")]
    assert created["metadata"]["name"] == "cp-workers" and created["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert created["spec"]["maxUnavailable"] == 1 and created["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert created["spec"]["selector"]["matchLabels"]["rolloutfleet.io/job"] == "cp"
    indexed = {KEY: [{"owners": ["job-uid"], "spec": created["spec"]}]}
    kube.calls.clear()
    for _ in range(3):  # steady state: no call at all
        await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, pdb_index=indexed)
    assert not kube.named("create_pdb") and not kube.named("patch_pdb")
    # A new maxUnavailable: one create answered 409, then one patch of the spec.
    job["spec"]["disruption"] = {"maxUnavailable": "50%"}
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, pdb_index=indexed)
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, pdb_index=indexed)  # the watch lags: not sent again
    assert [p["body"]["spec"]["maxUnavailable"] for p in kube.named("patch_pdb")] == ["50%"]
    assert kube.pdbs["cp-workers"]["spec"]["maxUnavailable"] == "50%"
    # Another job's of the same name (deleted, recreated): left to the garbage collector.
    kube.calls.clear()
    await reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, pdb_index={KEY: [{"owners": ["old-uid"], "spec": {}}]})
    assert not kube.named("create_pdb") and not kube.named("patch_pdb")


@pytest.mark.asyncio
async def test_the_status_this_process_wrote_wins_over_an_older_copy_in_the_index(
    kube: Any, posted: list[dict[str, Any]]
) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(restartPolicy={"maxRestarts": 5})
    await run(runtime, job, [])
    failed = [observed(kube, "cp-worker-0"), observed(kube, "cp-worker-1", "Failed", exit_code=1)]
    await run(runtime, job, failed)
    # A watch event from before our patch replaces the index entry: no restart records in it.
    await run(runtime, indexed_job(restartPolicy={"maxRestarts": 5}), failed)
    assert [e["reason"] for e in posted].count("WorkerFailed") == 1
    assert runtime.job(KEY).written is not None and runtime.job(KEY).written["restarts"] == 1


@pytest.mark.asyncio
async def test_an_unusable_spec_is_reported_once_and_gets_no_pods(kube: Any, posted: list[dict[str, Any]]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    bad = indexed_job(env={"id": "CartPole-v1", "entryPoint": "pkg.mod:make"})
    assert await run(runtime, bad, []) is None
    await run(runtime, bad, [])
    assert bad["status"]["reason"] == "InvalidSpec" and "spec.env" in bad["status"]["message"]
    assert len(kube.named("patch_status")) == 1 and made(kube) == []
    assert [e["reason"] for e in posted] == ["InvalidSpec"]
    await run(runtime, indexed_job(), [])  # fixed: pods, and a later breakage is reported again
    assert len(made(kube)) == 2 and runtime.job(KEY).reported_invalid == ""


@pytest.mark.asyncio
async def test_refused_creations_stop_at_the_first_batch_and_are_reported_once(
    kube: Any, posted: list[dict[str, Any]]
) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(replicas=20)
    kube.fail("create_namespaced_pod", 403, "exceeded quota: workers")
    await run(runtime, job, [])
    await run(runtime, job, [])
    assert len(kube.named("create_namespaced_pod")) == 2  # one pod per round, not twenty
    refused = [e for e in posted if e["reason"] == "CreateFailed"]
    assert len(refused) == 1 and refused[0]["message"] == (
        "the API server refused worker pod(s) 0: exceeded quota: workers"
    )
    kube.recover("create_namespaced_pod")
    await run(runtime, job, [])
    assert len(kube.pods) == 20 and runtime.job(KEY).reported_refusal == ""


@pytest.mark.asyncio
async def test_a_job_being_deleted_or_gone_is_left_alone(kube: Any, posted: list[dict[str, Any]]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job()
    job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert await run(runtime, job, []) is None
    assert await reconcile(KEY, runtime, {}, {}) is None
    assert kube.calls == [] and posted == []


@pytest.mark.asyncio
async def test_a_restart_in_backoff_asks_for_a_round_when_it_falls_due(kube: Any, posted: list[dict[str, Any]]) -> None:
    policy = {"maxRestarts": 5, "backoffSeconds": 3, "backoffLimitSeconds": 60}
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(restartPolicy=policy)
    await run(runtime, job, [])
    await run(runtime, job, [observed(kube, "cp-worker-0"), observed(kube, "cp-worker-1", "Failed", exit_code=1)])
    requeue = await run(runtime, job, [observed(kube, "cp-worker-0")])  # the failed pod is gone
    assert requeue is not None and 0 < requeue <= 3
    assert made(kube).count("cp-worker-1") == 1  # not yet replaced


def test_event_messages_list_a_few_indexes_and_count_the_rest() -> None:
    assert shown([3, 1]) == "3, 1"
    assert shown(range(13)) == "0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 3 more"


@pytest.mark.asyncio
async def test_a_refused_pdb_is_reported_once_and_the_workers_still_run(kube: Any, posted: list[Any]) -> None:
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job()
    kube.fail("create_pdb", 403, 'poddisruptionbudgets.policy is forbidden: User "op" cannot create')
    await run(runtime, job, [])
    runtime.job(KEY).pdb.sent = None  # as if PDB_RETRY_S had passed
    await run(runtime, job, [])
    assert sorted(made(kube)) == ["cp-worker-0", "cp-worker-1"] and len(kube.named("create_pdb")) == 2
    warnings = [e for e in posted if e["reason"] == "PodDisruptionBudgetFailed"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning" and "forbidden" in warnings[0]["message"]


@pytest.mark.asyncio
async def test_an_autoscaled_job_keeps_the_autoscaler_s_size_says_each_change_once_and_removes_gracefully(
    kube: Any, posted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rolloutfleet.rules.autoscale_signals import Signals
    from rolloutfleet_operator.scaling import autoscale_tick

    looks = iter([Signals(now=0.0), Signals(now=400.0)])  # no learner: idle after idleSeconds
    monkeypatch.setattr(autoscale_tick, "read_signals", lambda *args: next(looks))
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    job = indexed_job(replicas=3, autoscaling={"minReplicas": 0, "maxReplicas": 5, "idleSeconds": 300})
    await run(runtime, job, [])
    assert sorted(made(kube)) == ["cp-worker-0", "cp-worker-1", "cp-worker-2"]
    assert job["status"]["desiredReplicas"] == 3 and job["status"]["autoscaling"]["reason"] == "starting: 3 workers"
    await autoscale_tick.autoscale(KEY, runtime, {KEY: [job]}, now=1000.0)  # the first look: nothing to judge yet
    await autoscale_tick.autoscale(KEY, runtime, {KEY: [job]}, now=1400.0)  # 400 s later, still no learner
    pods = [observed(kube, f"cp-worker-{i}") for i in range(3)]
    kube.calls.clear()
    await run(runtime, job, pods)
    assert job["status"]["desiredReplicas"] == 0
    reason = job["status"]["autoscaling"]["reason"]
    assert reason == "no learner has read yet (idleSeconds 300): 3 -> 0 workers"
    assert job["status"]["autoscaling"]["lastActiveReplicas"] == 3
    deletes = kube.named("delete_namespaced_pod")
    assert sorted(d["name"] for d in deletes) == ["cp-worker-0", "cp-worker-1", "cp-worker-2"]
    assert all(
        d["grace_period_seconds"] == runtime.config.grace_seconds for d in deletes
    )  # SIGTERM: fragment published
    scaled = [e for e in posted if e["reason"] == "Scaled"]
    assert [e["message"] for e in scaled] == [reason]  # once, though two rounds saw it
    assert "DeletedWorkers" in [e["reason"] for e in posted] and job["status"]["restarts"] == 0
    from prometheus_client import REGISTRY

    labels = {"namespace": "team", "job_name": "cp"}
    assert REGISTRY.get_sample_value("rolloutfleet_autoscaler_desired_replicas", labels) == 0
    assert REGISTRY.get_sample_value("rolloutfleet_autoscaler_changes_total", labels) == 1


@pytest.mark.asyncio
async def test_evaluation_pods_are_kept_apart_from_the_workers(kube: Any, posted: list[dict[str, Any]]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    job = indexed_job(replicas=2, evaluation={"workers": 2, "episodes": 4})
    await run(runtime, job, [])
    assert sorted(made(kube)) == ["cp-eval-0", "cp-eval-1", "cp-worker-0", "cp-worker-1"]
    assert ("CreatedEvaluators", "created evaluation pod(s) cp-eval-0, cp-eval-1") in [
        (e["reason"], e["message"]) for e in posted
    ]

    def seen(name: str) -> PodView:
        pod = {**kube.pods[name], "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        view = PodView.from_pod(pod) or evaluator_view(pod)
        assert view is not None
        return view

    pods = [seen(name) for name in sorted(kube.pods)]
    kube.calls.clear()
    await run(runtime, job, pods)
    assert kube.named("create_namespaced_pod") == [] and kube.named("delete_namespaced_pod") == []
    status = job["status"]
    assert (status["replicas"], status["readyReplicas"], status["desiredReplicas"]) == (2, 2, 2)  # workers only
    assert status["evaluation"]["workers"] == 2 and status["evaluation"]["readyWorkers"] == 2

    # More episodes: the evaluation pods are replaced, the workers are not; suspended: none kept.
    job["spec"]["evaluation"] = {"workers": 2, "episodes": 8}
    await run(runtime, job, pods)
    assert sorted(c["name"] for c in kube.named("delete_namespaced_pod")) == ["cp-eval-0", "cp-eval-1"]
    kube.calls.clear()
    job["spec"]["suspend"] = True
    await run(runtime, job, [p for p in pods if p.role == "worker"])
    assert kube.named("create_namespaced_pod") == []


@pytest.mark.asyncio
async def test_pods_created_late_in_a_long_round_are_not_created_again(
    kube: Any, posted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round that creates thousands of pods takes most of a minute: each pod is expected
    from when its batch was answered, so the next round, before the watch shows them, does
    not post them again (it did: 676 extra POSTs, all 409, at 3 000 pods)."""
    import time as real_time
    from types import SimpleNamespace

    from rolloutfleet_operator.loop import reconcile as module
    from rolloutfleet_operator.loop.observe import EXPECTATION_TTL_S

    # Round 1 starts at 0 and its two batches are answered EXPECTATION_TTL_S + 10 s later;
    # round 2 comes 2 s after that. monotonic() is called once at a round's start, once per batch.
    ticks = iter([0.0, EXPECTATION_TTL_S + 10, EXPECTATION_TTL_S + 11, EXPECTATION_TTL_S + 13])
    clock = SimpleNamespace(monotonic=lambda: next(ticks), time=real_time.time, perf_counter=real_time.perf_counter)
    monkeypatch.setattr(module, "time", clock)
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(replicas=3)
    await run(runtime, job, [])
    assert sorted(made(kube)) == ["cp-worker-0", "cp-worker-1", "cp-worker-2"]
    kube.calls.clear()
    await run(runtime, job, [])  # the watch has shown none of them yet
    assert made(kube) == []


@pytest.mark.asyncio
async def test_a_pod_that_exists_already_is_expected_again_not_posted_every_round(
    kube: Any, posted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create answered 409 (it exists; its resourceVersion unknown) renews the
    expectation, so the pod is not posted again in each round until the watch shows it
    (7 459 extra POSTs, all 409, in a 10 000-pod run before this)."""
    import time as real_time
    from types import SimpleNamespace

    from rolloutfleet_operator.loop import reconcile as module
    from rolloutfleet_operator.loop.observe import EXPECTATION_SETTLE_S

    # monotonic() is called once at a round's start, once per batch (3 pods: batches of 1, 2).
    late = 1 + EXPECTATION_SETTLE_S
    ticks = iter([0.0, 0.0, 0.0, 1.0, late, late, late, late + 1])
    clock = SimpleNamespace(monotonic=lambda: next(ticks), time=real_time.time, perf_counter=real_time.perf_counter)
    monkeypatch.setattr(module, "time", clock)
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(replicas=3)
    await run(runtime, job, [])
    # The watch went past the creates without showing the pods (say, deleted meanwhile, as
    # another process created them again): after a short settle they are posted again.
    runtime.note_pod_version("team", "1000000")
    kube.fail("create_namespaced_pod", 409)
    kube.calls.clear()
    await run(runtime, job, [])  # the watch is past them: the pods' own events are due
    assert kube.named("create_namespaced_pod") == []
    await run(runtime, job, [])  # settled, still not shown: posted again, answered 409
    assert len(kube.named("create_namespaced_pod")) == 3
    assert [e["reason"] for e in posted] == ["CreatedWorkers"]  # no event for pods it did not create
    kube.calls.clear()
    await run(runtime, job, [])
    assert kube.named("create_namespaced_pod") == []

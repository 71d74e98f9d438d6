"""The reconcile plan: desired vs. observed pods, restarts with backoff and a budget."""

from __future__ import annotations

from typing import Any

from rolloutfleet.rules.missing_modules import missing_module_line
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import PodView
from rolloutfleet_operator.loop.plan import WorkerRecord, creation_batches, plan, records_from_status

HASH = "current"


def job(**spec: Any) -> RolloutJob:
    body: dict[str, Any] = {"replicas": 3, "env": {"id": "CartPole-v1"}}
    body.update(spec)
    return RolloutJob.from_dict({"metadata": {"name": "j"}, "spec": body})


def pod(index: int, phase: str = "Running", ready: bool = True, hash_: str = HASH, **kw: Any) -> PodView:
    return PodView(
        name=f"j-worker-{index}",
        uid=kw.pop("uid", f"uid-{index}"),
        index=index,
        template_hash=hash_,
        phase=phase,
        ready=ready,
        **kw,
    )


def test_creates_missing_workers_by_index() -> None:
    result = plan(job(), [pod(1)], {}, now=100.0, current_hash=HASH)
    assert result.create == [0, 2] and result.delete == []


def test_scale_down_deletes_the_highest_indexes() -> None:
    result = plan(job(replicas=1), [pod(0), pod(1), pod(2)], {}, now=0.0, current_hash=HASH)
    assert [name for name, _ in result.delete] == ["j-worker-2", "j-worker-1"] and result.create == []


def test_suspend_deletes_every_pod_and_creates_none() -> None:
    result = plan(job(suspend=True), [pod(0), pod(1)], {}, now=0.0, current_hash=HASH)
    assert sorted(n for n, _ in result.delete) == ["j-worker-0", "j-worker-1"] and result.create == []


def test_a_failed_pod_is_counted_once_deleted_and_replaced_after_backoff() -> None:
    spec = {"restartPolicy": {"maxRestarts": 5, "backoffSeconds": 2, "backoffLimitSeconds": 60}}
    failed = pod(
        1,
        phase="Failed",
        ready=False,
        exit_code=137,
        started_at="1970-01-01T00:01:30Z",
        finished_at="1970-01-01T00:01:40Z",
    )
    first = plan(job(**spec), [pod(0), failed, pod(2)], {}, now=101.0, current_hash=HASH)
    record = first.records[1]
    assert record.restarts == 1 and record.last_failed_pod == "uid-1" and record.last_exit_code == 137
    assert record.restart_at == 100.0 + 2  # backoff counted from the exit (finishedAt)
    assert first.delete == [("j-worker-1", "failed; replacing it")] and first.create == []
    assert [e.reason for e in first.events] == ["WorkerFailed"]
    # The same failed pod seen again (an operator restarted before the delete landed): not recounted.
    again = plan(job(**spec), [pod(0), failed, pod(2)], first.records, now=101.5, current_hash=HASH)
    assert again.records[1].restarts == 1 and again.events == []
    # Pod gone, backoff not over: wait, and say when.
    waiting = plan(job(**spec), [pod(0), pod(2)], first.records, now=101.0, current_hash=HASH)
    assert waiting.create == [] and waiting.requeue_after == 1.0
    due = plan(job(**spec), [pod(0), pod(2)], first.records, now=102.5, current_hash=HASH)
    assert due.create == [1] and due.records[1].restart_at is None


def test_a_pod_that_exits_while_being_deleted_is_no_failure() -> None:
    # A real kubelet reports how the containers of a deleted pod ended (exit 0 after
    # SIGTERM, or 137 after the grace period) before the final delete. Replaced for a spec
    # change or evicted, that pod is going away: nothing is counted, nothing deleted again.
    for exit_code, phase in ((0, "Succeeded"), (137, "Failed")):
        going = pod(1, phase=phase, ready=False, exit_code=exit_code, deleting=True, hash_="old")
        result = plan(job(), [pod(0), going], {}, now=100.0, current_hash=HASH)
        assert 1 not in result.records and result.events == [] and result.delete == []
        assert 1 not in result.create  # the name is still taken until the watch shows it gone


def test_consecutive_failures_double_the_backoff_up_to_the_limit() -> None:
    spec = {"restartPolicy": {"maxRestarts": 10, "backoffSeconds": 1, "backoffLimitSeconds": 3}}
    records: dict[int, WorkerRecord] = {}
    delays = []
    for n in range(4):
        failed = pod(
            0,
            phase="Failed",
            ready=False,
            uid=f"u{n}",
            finished_at=f"1970-01-01T00:00:{10 * n + 5:02d}Z",
            started_at=f"1970-01-01T00:00:{10 * n + 4:02d}Z",
        )
        result = plan(job(replicas=1, **spec), [failed], records, now=10.0 * n + 5, current_hash=HASH)
        records = result.records
        assert records[0].restart_at is not None
        delays.append(records[0].restart_at - (10.0 * n + 5))
    assert delays == [1, 2, 3, 3]


def test_a_spent_budget_keeps_the_failed_pod_and_marks_the_worker_down() -> None:
    spec = {"restartPolicy": {"maxRestarts": 1, "backoffSeconds": 0}}
    first = plan(
        job(replicas=1, **spec), [pod(0, phase="Failed", ready=False, uid="a")], {}, now=10.0, current_hash=HASH
    )
    assert first.records[0].restarts == 1 and not first.records[0].down
    second = plan(
        job(replicas=1, **spec),
        [pod(0, phase="Failed", ready=False, uid="b")],
        first.records,
        now=20.0,
        current_hash=HASH,
    )
    assert second.records[0].down and second.delete == [] and second.create == []
    assert second.down == [0] and second.events[0].reason == "RestartBudgetExhausted"
    # Raising maxRestarts brings the worker back.
    raised = plan(
        job(replicas=1, restartPolicy={"maxRestarts": 3, "backoffSeconds": 0}),
        [],
        second.records,
        now=30.0,
        current_hash=HASH,
    )
    assert raised.create == [0] and not raised.records[0].down


def test_a_module_the_image_lacks_is_no_restart_the_worker_waits_for_a_spec_change() -> None:
    line = missing_module_line("torch", "worker-slim", "spec.policy: ModuleNotFoundError: No module named 'torch'")
    lacking = pod(0, phase="Failed", ready=False, uid="a", exit_code=3, message=line)
    first = plan(job(replicas=2), [lacking, pod(1)], {}, now=10.0, current_hash=HASH)
    record = first.records[0]
    # Not restarted (the same image fails the same way): no restart counted, no backoff, no replacement.
    assert record.down and record.restarts == 0 and record.restart_at is None and record.lacks_module == HASH
    assert first.delete == [] and first.create == [] and first.down == [0]  # the pod kept for `kubectl logs`
    assert [e.reason for e in first.events] == ["MissingModule"] and "spec.image" in first.events[0].message
    # Later reconciles leave it down, however much budget is left; gone or not, it is not recreated.
    for pods in ([lacking, pod(1)], [pod(1)]):
        later = plan(job(replicas=2), pods, first.records, now=500.0, current_hash=HASH)
        assert later.create == [] and later.delete == [] and later.down == [0] and later.events == []
    # A spec change (spec.image, policy.inference: torch) is a new template: the kept pod goes, then
    # the worker comes back.
    changed = plan(job(replicas=2), [lacking, pod(1, hash_="new")], first.records, now=510.0, current_hash="new")
    assert changed.delete == [("j-worker-0", "failed; replacing it")] and changed.create == []
    back = plan(job(replicas=2), [pod(1, hash_="new")], changed.records, now=511.0, current_hash="new")
    assert back.create == [0] and not back.records[0].down and back.records[0].lacks_module == ""
    # Env spaces the policy cannot take: the same on every start, down at once with its own reason.
    unsupported = pod(0, phase="Failed", ready=False, uid="c", exit_code=3,
                      message="spec.env: unsupported observation space Text(1, 8): observations may be Box, ...")  # fmt: skip
    refused = plan(job(replicas=2), [unsupported, pod(1)], {}, now=10.0, current_hash=HASH)
    assert refused.records[0].down and refused.records[0].restarts == 0 and refused.create == []
    assert [e.reason for e in refused.events] == ["UnsupportedSpace"]
    # Exit 3 for another reason (an env that fails) is an ordinary failure.
    env_failed = pod(0, phase="Failed", ready=False, uid="b", exit_code=3, message="spec.env.id: Env X-v0 not found")
    ordinary = plan(job(replicas=2), [env_failed, pod(1)], {}, now=10.0, current_hash=HASH)
    assert ordinary.records[0].restarts == 1 and not ordinary.records[0].down


REASONS = {
    "EvictionByEvictionAPI": "Evicted",
    "PreemptionByScheduler": "Preempted",
    "DeletionByTaintManager": "NodeTainted",
    "TerminationByKubelet": "KubeletTerminated",
    "DeletionByPodGC": "NodeGone",
    "SomethingNew": "Other",
}
BUDGET_OF_ONE = {"restartPolicy": {"maxRestarts": 1, "backoffSeconds": 30}}


def test_each_disruption_reason_is_counted_apart_never_against_max_restarts() -> None:
    records: dict[int, WorkerRecord] = {}
    counts: dict[str, int] = {}
    for n, (reason, kind) in enumerate(REASONS.items()):
        going = pod(0, ready=False, deleting=True, uid=f"u{n}", disruption=reason, disruption_message="why")
        result = plan(job(replicas=1, **BUDGET_OF_ONE), [going], records, 10.0 * n, HASH, disruptions=counts)
        records, counts = result.records, result.disruptions
        assert counts[kind] == 1, (reason, counts)
        assert [e.reason for e in result.events] == ["WorkerDisrupted"] and result.events[0].type == "Normal"
        assert f"worker(s) 0 disrupted ({kind}: {reason}: why)" in result.events[0].message
        # Gone: replaced at once (no backoff), and not counted again by its last view.
        gone = plan(
            job(replicas=1, **BUDGET_OF_ONE), [], records, 10.0 * n + 1, HASH, vanished=[going], disruptions=counts
        )
        assert gone.create == [0] and gone.disruptions == counts and gone.events == []
    assert records[0].restarts == 0 and records[0].disruptions == len(REASONS) and records[0].restart_at is None
    assert sum(counts.values()) == len(REASONS)


def test_a_pod_the_kubelet_evicted_is_cleared_away_and_replaced_not_failed() -> None:
    evicted = pod(
        1, phase="Failed", ready=False, exit_code=137, reason="Evicted", disruption="TerminationByKubelet"
    )  # node-pressure eviction: the pod object stays, Failed
    result = plan(job(**BUDGET_OF_ONE), [pod(0), evicted, pod(2)], {}, now=5.0, current_hash=HASH)
    assert result.disruptions == {"KubeletTerminated": 1} and result.records[1].restarts == 0
    assert result.delete == [("j-worker-1", "disrupted (KubeletTerminated); replacing it")]
    assert [e.reason for e in result.events] == ["WorkerDisrupted"]


def test_a_real_failure_still_counts_against_the_budget() -> None:
    for failed in (
        pod(0, phase="Failed", ready=False, exit_code=1, uid="crash"),
        pod(0, phase="Failed", ready=False, exit_code=137, reason="OOMKilled", uid="oom"),
    ):
        result = plan(job(replicas=1, **BUDGET_OF_ONE), [failed], {}, now=5.0, current_hash=HASH)
        assert result.records[0].restarts == 1 and result.disruptions == {} and result.create == []
        assert [e.reason for e in result.events] == ["WorkerFailed"]


def test_a_sigkill_not_reported_as_oomkilled_names_the_likely_causes() -> None:
    # Seen on a real node: the kernel's OOM killer acted on the pod's cgroup
    # (oom_memcg=/kubepods/pod<uid>) and containerd reported the container as 137, Error.
    killed = pod(0, phase="Failed", ready=False, exit_code=137, reason="Error", uid="k")
    why = plan(job(replicas=1, **BUDGET_OF_ONE), [killed], {}, now=5.0, current_hash=HASH).records[0].last_error
    assert why.startswith("exited with code 137, Error (SIGKILL") and "out-of-memory" in why
    reported = pod(0, phase="Failed", ready=False, exit_code=137, reason="OOMKilled", uid="o")
    why = plan(job(replicas=1, **BUDGET_OF_ONE), [reported], {}, now=5.0, current_hash=HASH).records[0].last_error
    assert why == "exited with code 137, OOMKilled"
    crashed = pod(0, phase="Failed", ready=False, exit_code=1, reason="Error", uid="c")
    assert "SIGKILL" not in plan(job(replicas=1), [crashed], {}, now=5.0, current_hash=HASH).records[0].last_error


def test_a_plain_delete_is_a_disruption_and_a_failed_pod_removed_unseen_a_failure() -> None:
    deleted = plan(job(**BUDGET_OF_ONE), [pod(0), pod(2)], {}, now=50.0, current_hash=HASH, vanished=[pod(1)])
    assert deleted.disruptions == {"Deleted": 1} and deleted.records[1].restarts == 0 and deleted.create == [1]
    assert "Deleted: deleted without a DisruptionTarget condition" in deleted.records[1].last_disruption
    crashed = pod(1, phase="Failed", ready=False, exit_code=2, uid="crashed")
    failed = plan(job(**BUDGET_OF_ONE), [pod(0), pod(2)], {}, now=50.0, current_hash=HASH, vanished=[crashed])
    assert failed.disruptions == {} and failed.records[1].restarts == 1 and failed.create == []


def test_disruptions_are_counted_once_per_pod_across_reconciles_and_operator_restarts() -> None:
    evicted = pod(0, ready=False, deleting=True, uid="e1", disruption="EvictionByEvictionAPI")
    first = plan(job(replicas=1), [evicted], {}, 1.0, HASH, disruptions={"Evicted": 4})
    assert first.disruptions == {"Evicted": 5}
    # A new operator reads the records and counts back from the status: nothing counted twice.
    status = {"workers": {str(i): r.to_status() for i, r in first.records.items()}}
    again = plan(job(replicas=1), [evicted], records_from_status(status), 2.0, HASH, disruptions=first.disruptions)
    assert again.disruptions == {"Evicted": 5} and again.events == []
    vanished = plan(
        job(replicas=1), [], records_from_status(status), 3.0, HASH, vanished=[evicted], disruptions=first.disruptions
    )
    assert vanished.disruptions == {"Evicted": 5} and vanished.create == [0]


def test_a_pod_stuck_deleting_on_a_silent_node_is_deleted_again_with_grace_0() -> None:
    lost = pod(0, ready=False, deleting=True, disruption="DeletionByTaintManager", deletion_at="1970-01-01T00:01:40Z")
    result = plan(job(replicas=2), [lost, pod(1)], {}, now=100.0, current_hash=HASH)
    assert result.delete == [("j-worker-0", "its node does not confirm the delete; deleting it with grace 0")]
    assert result.disruptions == {"NodeTainted": 1} and result.create == []  # created once the name is free
    # Any pod still there 30 s after its grace period ended: its kubelet cannot confirm.
    stuck = pod(1, ready=True, deleting=True, deletion_at="1970-01-01T00:01:00Z")
    assert [n for n, _ in plan(job(replicas=2), [pod(0), stuck], {}, 89.0, HASH).delete] == []
    assert [n for n, _ in plan(job(replicas=2), [pod(0), stuck], {}, 90.0, HASH).delete] == ["j-worker-1"]
    # A ready pod the taint manager deletes on a live node stops gracefully: left to its kubelet.
    tainted = pod(0, ready=True, deleting=True, disruption="DeletionByTaintManager", deletion_at="1970-01-01T00:01:40Z")
    assert plan(job(replicas=1), [tainted], {}, now=100.0, current_hash=HASH).delete == []


def test_stale_pods_are_replaced_a_few_at_a_time() -> None:
    pods = [pod(i, hash_="old") for i in range(8)]
    result = plan(job(replicas=8), pods, {}, now=0.0, current_hash=HASH, max_unavailable=0.25)
    assert [n for n, _ in result.delete] == ["j-worker-7", "j-worker-6"]  # 25 % of 8, highest first
    not_ready = [pod(0, hash_="old", ready=False), pod(1, hash_="old")]
    result = plan(job(replicas=2), not_ready, {}, now=0.0, current_hash=HASH, max_unavailable=0.25)
    assert [n for n, _ in result.delete] == ["j-worker-0"]  # unavailable already: replaced first, no room for more


def test_a_pod_still_going_away_blocks_its_replacement() -> None:
    result = plan(job(replicas=1), [pod(0, deleting=True, ready=False)], {}, now=0.0, current_hash=HASH)
    assert result.create == [] and result.delete == []


def test_records_round_trip_through_the_status() -> None:
    record = WorkerRecord(
        restarts=2, consecutive_failures=1, restart_at=12.5, last_failed_pod="x", last_exit_code=3, last_error="boom"
    )
    assert records_from_status({"workers": {"4": record.to_status()}}) == {4: record}
    assert records_from_status({"workers": {"nope": {}}}) == {}


def test_creation_batches_start_small_double_and_cover_every_index_once() -> None:
    indexes = list(range(1000))
    batches = list(creation_batches(indexes, largest=256))
    assert [len(b) for b in batches] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 233]
    assert [i for b in batches for i in b] == indexes
    assert list(creation_batches([])) == []

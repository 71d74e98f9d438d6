"""The pure Kueue logic: the Workload kept for a job, what its status means, the admitted
flavors' placement, and the quota hand-back after an eviction (as Kueue's jobframework does)."""

from __future__ import annotations

from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import JOB_LABEL, build_pod, owner_reference
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.kueue import admission as kueue

UID = "0f3c1e8a-uid"
LABELS = {kueue.QUEUE_LABEL: "team-a"}


def make_job(**spec: Any) -> RolloutJob:
    body = {"env": {"id": "CartPole-v1"}, "replicas": 3, "resources": {"cpu": "500m", "memory": "1Gi", "gpu": 1}}
    return RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "ns"}, "spec": {**body, **spec}})


def workload_for(job: RolloutJob, labels: dict[str, str] = LABELS, priority: int | None = None) -> dict[str, Any]:
    pod = build_pod(job, UID, 0, OperatorConfig())
    return kueue.build_workload(
        job.name, job.namespace, UID, labels, job.spec.replicas, pod, priority, owner_reference(job, UID), JOB_LABEL
    )


def with_status(workload: dict[str, Any], *conditions: tuple[str, str, str, str], **status: Any) -> dict[str, Any]:
    found = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    metadata = {**workload["metadata"], "resourceVersion": "42", "generation": 1}
    return {**workload, "metadata": metadata, "status": {"conditions": found, **status}}


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [{"name": "workers", "count": 3, "flavors": {"cpu": "spot", "nvidia.com/gpu": "a100"}}],
}
ADMITTED = (("QuotaReserved", "True", "QuotaReserved", "Quota reserved"), ("Admitted", "True", "Admitted", "ok"))


def test_the_workload_carries_the_workers_real_requests_gpus_included_and_is_owned_by_the_job() -> None:
    workload = workload_for(make_job())
    (pod_set,) = workload["spec"]["podSets"]
    assert pod_set["name"] == "workers" and pod_set["count"] == 3
    (container,) = pod_set["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "env" not in container  # env changes do not requeue a job
    assert workload["spec"]["queueName"] == "team-a" and "priorityClassRef" not in workload["spec"]
    (owner,) = workload["metadata"]["ownerReferences"]
    assert owner["kind"] == "RolloutJob" and owner["uid"] == UID and owner["controller"] is True
    assert workload["metadata"]["labels"] == {JOB_LABEL: "cp"}
    assert workload["metadata"]["name"].startswith("rolloutjob-cp-")


def test_the_priority_class_label_names_a_workload_priority_class_and_its_value() -> None:
    labels = {**LABELS, kueue.PRIORITY_LABEL: "high"}
    spec = workload_for(make_job(), labels, priority=1000)["spec"]
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
    assert spec["priority"] == 1000


def test_what_kueue_admits_names_the_workload_so_a_scale_or_new_queue_makes_a_new_one() -> None:
    name = workload_for(make_job())["metadata"]["name"]
    assert workload_for(make_job())["metadata"]["name"] == name  # stable across rounds and restarts
    assert workload_for(make_job(replicas=4))["metadata"]["name"] != name
    assert workload_for(make_job(), {kueue.QUEUE_LABEL: "team-b"})["metadata"]["name"] != name
    assert workload_for(make_job(resources={"cpu": "1"}))["metadata"]["name"] != name
    # The worker's settings are not what Kueue admits: no requeue for them.
    assert workload_for(make_job(sampling={"rolloutFragmentLength": 7}))["metadata"]["name"] == name


def test_kueues_own_words_say_why_a_workload_waits() -> None:
    pending = with_status(
        workload_for(make_job()),
        ("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set workers: insufficient quota"),
    )
    waiting = kueue.waiting_for(pending)
    assert waiting.reason == "Pending"
    assert waiting.message.endswith("couldn't assign flavors to pod set workers: insufficient quota")
    lost = with_status(
        workload_for(make_job()), ("QuotaReserved", "False", "Inadmissible", "LocalQueue x doesn't exist")
    )
    assert kueue.waiting_for(lost).reason == "Inadmissible"
    evicted = with_status(
        workload_for(make_job()), *ADMITTED, ("Evicted", "True", "Preempted", "Preempted to accommodate a workload")
    )
    assert not kueue.is_admitted(evicted)
    assert kueue.waiting_for(evicted).reason == "EvictedPreempted"
    assert "Preempted to accommodate" in kueue.waiting_for(evicted).message


def test_only_an_admitted_workload_that_is_not_evicted_lets_workers_run() -> None:
    workload = workload_for(make_job())
    assert not kueue.is_admitted(workload)  # no status yet: Kueue has not looked at it
    assert not kueue.is_admitted(with_status(workload, ("QuotaReserved", "True", "QuotaReserved", "reserved")))
    assert kueue.is_admitted(with_status(workload, *ADMITTED, admission=ADMISSION))


def test_the_admitted_flavors_node_labels_and_tolerations_go_onto_the_pods() -> None:
    admitted = with_status(workload_for(make_job()), *ADMITTED, admission=ADMISSION)
    assert kueue.admitted_flavors(admitted) == ["a100", "spot"]
    toleration = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    flavors = {
        "spot": {"spec": {"nodeLabels": {"pool": "spot"}, "tolerations": [toleration]}},
        "a100": {"spec": {"nodeLabels": {"gpu": "a100"}}},
    }
    placement = kueue.flavor_placement(admitted, flavors)
    assert placement == {"nodeSelector": {"gpu": "a100", "pool": "spot"}, "tolerations": [toleration]}
    pod = build_pod(make_job(nodeSelector={"zone": "z1"}), UID, 0, OperatorConfig())
    placed = kueue.place(pod, placement)
    assert placed["spec"]["nodeSelector"] == {"zone": "z1", "gpu": "a100", "pool": "spot"}
    assert placed["spec"]["tolerations"][-1] == toleration  # after the node-loss ones every worker pod carries


def test_decide_creates_the_missing_workload_and_waits_for_kueue() -> None:
    wanted = workload_for(make_job())
    decision = kueue.decide(wanted, [], pods_left=False)
    assert decision.create is wanted and decision.admitted is None
    assert decision.waiting is not None and "team-a" in decision.waiting.message


def test_a_changed_job_keeps_the_old_workload_until_its_pods_are_gone() -> None:
    old = with_status(workload_for(make_job()), *ADMITTED, admission=ADMISSION)
    wanted = workload_for(make_job(replicas=1))
    decision = kueue.decide(wanted, [old], pods_left=True)
    assert decision.create is wanted and decision.delete == [] and decision.admitted is None
    assert kueue.decide(wanted, [old], pods_left=False).delete == [old["metadata"]["name"]]


def test_an_evicted_workload_hands_its_quota_back_only_once_its_pods_are_gone() -> None:
    evicted = with_status(
        workload_for(make_job()),
        *ADMITTED,
        ("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
        admission=ADMISSION,
    )
    assert kueue.decide(workload_for(make_job()), [evicted], pods_left=True).requeue == []
    (requeue,) = kueue.decide(workload_for(make_job()), [evicted], pods_left=False).requeue
    patch = kueue.requeue_status(requeue, now=1_800_000_000.0)
    assert patch["metadata"] == {"resourceVersion": "42"}  # refused if Kueue changed it meanwhile
    assert patch["status"]["admission"] is None
    types = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (types["QuotaReserved"]["status"], types["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert (types["Admitted"]["status"], types["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (types["Requeued"]["status"], types["Requeued"]["reason"]) == ("True", "Preempted")
    assert types["Evicted"]["status"] == "True"  # Kueue resets it when it admits again


def test_an_eviction_that_is_no_preemption_is_not_marked_requeued() -> None:
    evicted = with_status(
        workload_for(make_job()), *ADMITTED, ("Evicted", "True", "Deactivated", "deactivated"), admission=ADMISSION
    )
    types = {c["type"]: c for c in kueue.requeue_status(evicted, now=0.0)["status"]["conditions"]}
    assert types["Requeued"]["status"] == "False"


def test_pods_ready_follows_the_workers_in_jobframeworks_words() -> None:
    admitted = with_status(workload_for(make_job()), *ADMITTED, admission=ADMISSION)
    starting = kueue.pods_ready_status(admitted, all_ready=False, now=0.0)
    assert starting is not None
    (cond,) = [c for c in starting["status"]["conditions"] if c["type"] == "PodsReady"]
    assert (cond["status"], cond["reason"]) == ("False", "WaitForStart")
    assert "admission" not in starting["status"]  # only the condition changes
    started = with_status(admitted, *ADMITTED, ("PodsReady", "True", "Started", "all ready"), admission=ADMISSION)
    assert kueue.pods_ready_status(started, all_ready=True, now=0.0) is None  # already says so: no write
    lost = kueue.pods_ready_status(started, all_ready=False, now=0.0)
    assert lost is not None
    (cond,) = [c for c in lost["status"]["conditions"] if c["type"] == "PodsReady"]
    assert (cond["status"], cond["reason"]) == ("False", "WaitForRecovery")


def test_an_eviction_is_named_once_with_its_disruption_kind() -> None:
    workload = workload_for(make_job())
    preempted = with_status(workload, *ADMITTED, ("Evicted", "True", "Preempted", "Preempted by high"))
    preempted["status"]["conditions"][-1]["lastTransitionTime"] = "2026-12-06T08:00:00Z"
    name = workload["metadata"]["name"]
    assert kueue.eviction(preempted) == (f"{name}@2026-12-06T08:00:00Z", "Preempted")
    deactivated = with_status(workload, *ADMITTED, ("Evicted", "True", "Deactivated", "by an admin"))
    assert kueue.eviction(deactivated) is not None and kueue.eviction(deactivated)[1] == "Evicted"
    assert kueue.eviction(with_status(workload, *ADMITTED)) is None
    assert kueue.decide(workload, [preempted], pods_left=True).evicted == kueue.eviction(preempted)

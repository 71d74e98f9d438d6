"""An elastic job's slices (Kueue's KEP-77, as its jobframework does for its own jobs): a
scale-down shrinks the admitted Workload in place, a scale-up asks for the difference with
a replacement slice while the admitted workers keep running, and a replaced slice goes."""

from __future__ import annotations

from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import JOB_LABEL, build_pod, owner_reference
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.kueue import admission as kueue
from rolloutfleet_operator.kueue import slices
from tests.unit.operator.kueue.test_admission import ADMITTED, LABELS, UID, make_job, with_status

FINISHED = ("Finished", "True", "WorkloadSliceReplaced", "Replaced to accommodate a workload")
NOW = 1_800_000_000.0
ADMISSION_2 = {"clusterQueue": "cq", "podSetAssignments": [{"name": "workers", "count": 2, "flavors": {"cpu": "f"}}]}
PENDING = ("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set workers: insufficient quota")


def elastic(replicas: int, job: RolloutJob | None = None) -> dict[str, Any]:
    job = job or make_job(replicas=replicas)
    pod = build_pod(job, UID, 0, OperatorConfig())
    return kueue.build_workload(job.name, job.namespace, UID, LABELS, replicas, pod, None, owner_reference(job, UID),
                                JOB_LABEL, elastic=True)  # fmt: skip


def created(wanted: dict[str, Any], existing: list[dict[str, Any]]) -> dict[str, Any]:
    """What decide_elastic creates, as the API server would then show it."""
    decision = slices.decide_elastic(wanted, existing, pods_left=True, now=NOW)
    assert decision.create is not None
    return {**decision.create, "metadata": {**decision.create["metadata"], "namespace": "ns"}}


def test_the_name_and_shape_leave_the_count_out_and_the_workload_says_it_is_elastic() -> None:
    two, three = elastic(2), elastic(3)
    assert two["metadata"]["name"] == three["metadata"]["name"]
    assert two["metadata"]["labels"][kueue.SHAPE_LABEL] == three["metadata"]["labels"][kueue.SHAPE_LABEL]
    assert two["metadata"]["annotations"] == {kueue.ELASTIC_ANNOTATION: "true"}
    other = elastic(2, make_job(replicas=2, resources={"cpu": "1", "memory": "1Gi"}))
    assert other["metadata"]["labels"][kueue.SHAPE_LABEL] != two["metadata"]["labels"][kueue.SHAPE_LABEL]
    assert kueue.is_elastic({kueue.ELASTIC_ANNOTATION: "true"}) and not kueue.is_elastic({})


def test_the_first_slice_is_created_and_no_worker_runs_before_it_is_admitted() -> None:
    decision = slices.decide_elastic(elastic(2), [], pods_left=False, now=NOW)
    assert decision.create is not None and decision.create["metadata"]["name"].endswith("-1")
    assert kueue.REPLACEMENT_FOR not in decision.create["metadata"]["annotations"]
    assert decision.admitted is None and decision.admitted_count == 0


def test_a_scale_up_asks_for_a_replacement_slice_while_the_admitted_workers_run() -> None:
    first = with_status(created(elastic(2), []), *ADMITTED)
    decision = slices.decide_elastic(elastic(3), [first], pods_left=True, now=NOW)
    assert decision.admitted is not None and decision.admitted["metadata"]["name"] == first["metadata"]["name"]
    assert decision.admitted_count == 2 and not decision.delete and decision.resize is None
    assert decision.create is not None and kueue.pod_count(decision.create) == 3  # the whole size: Kueue counts the old
    assert decision.create["metadata"]["name"].endswith("-2")
    assert decision.create["metadata"]["annotations"][kueue.REPLACEMENT_FOR] == f"ns/{first['metadata']['name']}"
    assert decision.scale_up is not None and "1 more worker" in decision.scale_up.message

    # Queued: the old slice's workers go on, and the job says why the third waits, in Kueue's words.
    second = with_status(created(elastic(3), [first]), PENDING)
    waiting = slices.decide_elastic(elastic(3), [first, second], pods_left=True, now=NOW)
    assert waiting.create is None and not waiting.delete and waiting.admitted_count == 2
    assert waiting.scale_up is not None and "insufficient quota" in waiting.scale_up.message

    # Admitted: Kueue finished the old slice; it is deleted and the new one allows three.
    done = slices.decide_elastic(
        elastic(3), [with_status(first, FINISHED), with_status(second, *ADMITTED)], pods_left=True, now=NOW
    )
    assert done.delete == [first["metadata"]["name"]] and done.admitted_count == 3 and done.scale_up is None
    assert done.admitted is not None and done.admitted["metadata"]["name"] == second["metadata"]["name"]


def test_a_scale_down_shrinks_the_admitted_slice_in_place() -> None:
    first = with_status(created(elastic(3), []), *ADMITTED)
    decision = slices.decide_elastic(elastic(1), [first], pods_left=True, now=NOW)
    assert decision.create is None and not decision.delete and decision.admitted_count == 1
    assert decision.resize is not None and decision.resize[1] == 1
    patch = kueue.with_count(decision.resize[0], 1)
    assert patch["metadata"]["resourceVersion"] == "42"
    assert [ps["count"] for ps in patch["spec"]["podSets"]] == [1]
    assert patch["spec"]["podSets"][0]["template"] == first["spec"]["podSets"][0]["template"]  # sent whole
    to_zero = slices.decide_elastic(elastic(0), [first], pods_left=True, now=NOW)  # autoscaled to 0: no quota
    assert to_zero.admitted_count == 0 and to_zero.create is not None and kueue.pod_count(to_zero.create) == 0


def test_a_scale_up_no_longer_wanted_is_withdrawn_and_a_waiting_one_follows_the_count() -> None:
    first = with_status(created(elastic(2), []), *ADMITTED)
    second = with_status(created(elastic(4), [first]), PENDING)
    back = slices.decide_elastic(elastic(2), [first, second], pods_left=True, now=NOW)
    assert back.delete == [second["metadata"]["name"]] and back.admitted_count == 2 and back.resize is None
    less = slices.decide_elastic(elastic(3), [first, second], pods_left=True, now=NOW)
    assert less.resize is not None and less.resize[0]["metadata"]["name"] == second["metadata"]["name"]
    assert less.resize[1] == 3 and less.admitted_count == 2


def test_an_evicted_slice_stops_its_workers_then_hands_its_quota_back() -> None:
    evicted = with_status(
        created(elastic(2), []), *ADMITTED, ("Evicted", "True", "Preempted", "Preempted by a higher priority job"),
        admission={"clusterQueue": "cq"},
    )  # fmt: skip
    while_pods = slices.decide_elastic(elastic(2), [evicted], pods_left=True, now=NOW)
    assert while_pods.admitted is None and while_pods.admitted_count == 0 and not while_pods.requeue
    assert while_pods.waiting is not None and while_pods.waiting.reason == "EvictedPreempted"
    gone = slices.decide_elastic(elastic(2), [evicted], pods_left=False, now=NOW)
    assert gone.requeue == [evicted] and not gone.delete

    # With a scale-up waiting behind it, the evicted slice goes and the replacement queues alone.
    second = with_status(created(elastic(3), [with_status(created(elastic(2), []), *ADMITTED)]), PENDING)
    both = slices.decide_elastic(elastic(3), [evicted, second], pods_left=False, now=NOW)
    assert both.delete == [evicted["metadata"]["name"]] and not both.requeue and both.admitted_count == 0


def test_another_shape_queues_again_and_the_old_one_goes_when_the_new_one_is_admitted() -> None:
    old = with_status(created(elastic(2), []), *ADMITTED)
    bigger = elastic(2, make_job(replicas=2, resources={"cpu": "1", "memory": "1Gi"}))
    first = slices.decide_elastic(bigger, [old], pods_left=True, now=NOW)
    assert first.create is not None and first.admitted is None and not first.delete
    new = with_status({**first.create, "metadata": {**first.create["metadata"], "namespace": "ns"}}, *ADMITTED)
    then = slices.decide_elastic(bigger, [old, new], pods_left=True, now=NOW)
    assert then.delete == [old["metadata"]["name"]] and then.admitted_count == 2


def finished_at(workload: dict[str, Any], at: float) -> dict[str, Any]:
    stamp = kueue.datetime.fromtimestamp(at, kueue.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [dict(c, lastTransitionTime=stamp) if c["type"] == "Finished" else c
                  for c in workload["status"]["conditions"]]  # fmt: skip
    return {**workload, "status": {**workload["status"], "conditions": conditions}}


def test_while_kueue_hands_over_to_the_replacement_the_old_slices_workers_keep_running() -> None:
    """Kueue finishes the old slice before it writes the new one's admission: in between,
    the old admission still stands (for a while), and nothing is deleted or created."""
    first = with_status(created(elastic(2), []), *ADMITTED, admission=ADMISSION_2)
    second = with_status(created(elastic(3), [first]), PENDING)
    replaced = finished_at(with_status(first, *ADMITTED, FINISHED, admission=ADMISSION_2), NOW - 1)
    decision = slices.decide_elastic(elastic(3), [replaced, second], pods_left=True, now=NOW)
    assert decision.admitted is not None and decision.admitted["metadata"]["name"] == first["metadata"]["name"]
    assert decision.admitted_count == 2 and not decision.delete and decision.create is None
    assert decision.scale_up is not None and decision.scale_up.reason == "Admitting"
    # An admission that never comes: after the grace, the old slice is gone and nothing runs.
    late = slices.decide_elastic(elastic(3), [finished_at(replaced, NOW - 60), second], pods_left=True, now=NOW)
    assert late.admitted is None and late.admitted_count == 0 and late.delete == [first["metadata"]["name"]]


def test_a_partly_admitted_slice_runs_what_kueue_gave_and_the_rest_is_asked_for_again() -> None:
    """Kueue's partial admission: a slice may be admitted for fewer workers than it asks
    (down to its minCount); the job runs those and asks for the rest with the next slice."""
    first = created(elastic(4), [])
    assert first["spec"]["podSets"][0]["minCount"] == 1  # any worker is better than none
    partly = with_status(first, *ADMITTED, admission={**ADMISSION_2})  # 2 of the 4 fit
    decision = slices.decide_elastic(elastic(4), [partly], pods_left=True, now=NOW)
    assert decision.admitted_count == 2 and decision.create is not None
    assert decision.create["spec"]["podSets"][0]["count"] == 4
    assert decision.create["spec"]["podSets"][0]["minCount"] == 3  # at least one more than it has
    fits = slices.decide_elastic(elastic(2), [partly], pods_left=True, now=NOW)  # what it has: the ask matches it
    assert fits.resize is not None and fits.resize[1] == 2 and fits.admitted_count == 2 and fits.create is None
    shrink = slices.decide_elastic(elastic(1), [partly], pods_left=True, now=NOW)
    assert shrink.resize is not None and shrink.resize[1] == 1 and shrink.admitted_count == 1
    assert kueue.with_count(shrink.resize[0], 0)["spec"]["podSets"][0]["minCount"] == 0


def test_below_an_admitted_slices_min_count_it_shrinks_by_a_replacement() -> None:
    """Kueue keeps an admitted pod set's minCount fixed (and count >= minCount): a smaller
    size is a new slice that replaces it, admitted at once since it needs less."""
    first = with_status(created(elastic(1), []), *ADMITTED)
    grown = created(elastic(4), [first])  # minCount 2: at least one more than the one it had
    admitted = with_status(grown, *ADMITTED, admission={**ADMISSION_2})
    above = slices.decide_elastic(elastic(2), [admitted], pods_left=True, now=NOW)
    assert above.resize is not None and above.resize[1] == 2 and above.create is None  # in place
    down = slices.decide_elastic(elastic(0), [admitted], pods_left=True, now=NOW)
    assert down.resize is None and down.admitted_count == 0 and down.scale_up is None
    assert down.create is not None and kueue.pod_count(down.create) == 0
    assert "minCount" not in down.create["spec"]["podSets"][0]
    key = f"ns/{admitted['metadata']['name']}"
    assert down.create["metadata"]["annotations"][kueue.REPLACEMENT_FOR] == key

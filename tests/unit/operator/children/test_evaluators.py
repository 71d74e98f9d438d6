"""Evaluation pods: built from the worker pod, read back apart from workers, planned, reported."""

from __future__ import annotations

import calendar
import time
from dataclasses import replace
from typing import Any

from rolloutfleet.evaluation.confidence import summarize
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.evaluators import (
    EVALUATOR_INDEX_LABEL,
    RETRY_S,
    build_evaluator_pod,
    evaluation_status,
    evaluator_hash,
    evaluator_view,
    plan_evaluators,
)
from rolloutfleet_operator.children.pods import INDEX_LABEL, PodView, build_pod, selector, template_hash
from rolloutfleet_operator.config import OperatorConfig

CONFIG = OperatorConfig(worker_port_per_index=True)


def job(evaluation: dict[str, Any] | None = None, **spec: Any) -> RolloutJob:
    body: dict[str, Any] = {"replicas": 3, "env": {"id": "CartPole-v1"}, **spec}
    if evaluation is not None:
        body["evaluation"] = evaluation
    return RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "team"}, "spec": body})


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def running(pod: dict[str, Any], uid: str = "u-1") -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "uid": uid},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip


def test_an_evaluation_pod_is_the_worker_pod_told_its_role() -> None:
    the_job = job({"workers": 2}, redis={"passwordSecret": {"name": "auth"}})
    pod = build_evaluator_pod(the_job, "uid-1", 1, CONFIG, "h")
    worker = build_pod(the_job, "uid-1", 1, CONFIG)
    labels = pod["metadata"]["labels"]
    assert pod["metadata"]["name"] == "cp-eval-1"
    assert labels["app.kubernetes.io/component"] == "evaluator" and labels[EVALUATOR_INDEX_LABEL] == "1"
    assert INDEX_LABEL not in labels
    # Not one of the workers the scale subresource counts, nor under their disruption budget.
    assert not all(labels.get(k) == v for k, v in (p.split("=") for p in selector("cp").split(",")))
    env = env_of(pod)
    assert env["ROLLOUTFLEET_ROLE"] == "evaluator" and env["ROLLOUTFLEET_WORKER_INDEX"] == "1"
    assert env["ROLLOUTFLEET_NUM_WORKERS"] == "2"
    assert env["ROLLOUTFLEET_REDIS_PASSWORD"] == env_of(worker)["ROLLOUTFLEET_REDIS_PASSWORD"]  # a secretKeyRef
    port = CONFIG.metrics_port(65)
    assert env["ROLLOUTFLEET_METRICS_PORT"] == str(port)
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["port"] == container["livenessProbe"]["httpGet"]["port"] == port
    assert container["image"] == worker["spec"]["containers"][0]["image"]
    assert pod["spec"]["securityContext"] == worker["spec"]["securityContext"]


def test_evaluation_pods_are_read_back_apart_from_workers() -> None:
    the_job = job({"workers": 1})
    pod = running(build_evaluator_pod(the_job, "uid-1", 0, CONFIG, "h"))
    assert PodView.from_pod(pod) is None  # never one of the worker plan's pods
    view = evaluator_view(pod)
    assert view is not None and (view.role, view.index, view.ready, view.template_hash) == ("evaluator", 0, True, "h")
    assert evaluator_view(running(build_pod(the_job, "uid-1", 0, CONFIG))) is None


def test_changing_spec_evaluation_replaces_evaluation_pods_only() -> None:
    before, after = job({"workers": 1, "episodes": 5}), job({"workers": 1, "episodes": 50})
    assert template_hash(before, CONFIG) == template_hash(after, CONFIG)  # no worker pod replaced
    assert evaluator_hash(before, CONFIG) != evaluator_hash(after, CONFIG)
    assert evaluator_hash(before, CONFIG) != evaluator_hash(job({"workers": 1, "episodes": 5}, image="w:2"), CONFIG)


def view(index: int, hash_: str, **fields: Any) -> PodView:
    fields.setdefault("phase", "Running")
    return PodView(name=f"cp-eval-{index}", uid=f"u{index}", index=index, template_hash=hash_, role="evaluator",
                   **fields)  # fmt: skip


def test_plan_creates_the_missing_and_deletes_surplus_and_stale_pods() -> None:
    the_job = job({"workers": 3})
    now = time.time()
    pods = [view(0, "h"), view(2, "old"), view(4, "h"), view(5, "h", deleting=True)]
    create, delete = plan_evaluators(the_job, pods, "h", True, now)
    assert create == [1]
    assert [name for name, _ in delete] == ["cp-eval-2", "cp-eval-4"]
    assert plan_evaluators(the_job, pods, "h", False, now)[0] == []  # suspended: none kept
    assert {n for n, _ in plan_evaluators(the_job, pods, "h", False, now)[1]} == {"cp-eval-0", "cp-eval-2", "cp-eval-4"}
    assert plan_evaluators(job(), [view(0, "h")], "h", True, now) == ([], [("cp-eval-0", delete[1][1])])


def test_a_failed_evaluation_pod_is_replaced_after_a_pause_and_never_for_a_bad_spec() -> None:
    the_job = job({"workers": 1})
    ended = "2026-01-01T00:00:00Z"
    at = float(calendar.timegm(time.strptime(ended, "%Y-%m-%dT%H:%M:%SZ")))
    crashed = view(0, "h", phase="Failed", exit_code=1, finished_at=ended, reason="Error")
    assert plan_evaluators(the_job, [crashed], "h", True, at + 1) == ([], [])
    assert [n for n, _ in plan_evaluators(the_job, [crashed], "h", True, at + RETRY_S)[1]] == ["cp-eval-0"]
    bad_spec = replace(crashed, exit_code=3)
    assert plan_evaluators(the_job, [bad_spec], "h", True, at + 10 * RETRY_S) == ([], [])


def test_status_holds_the_newest_version_with_its_interval() -> None:
    the_job = job({"workers": 2})
    latest = {**summarize(7, [(2.0, 2), (4.0, 4), (4.0, 5), (6.0, 9)]).to_json(), "evaluated_at": 0.0}
    pods = [view(0, "h", ready=True), view(1, "h", phase="Failed", exit_code=3, message="spec.env: no such env")]
    status = evaluation_status(the_job, pods, latest, 0.0)["evaluation"]
    assert (status["workers"], status["readyWorkers"], status["version"], status["episodes"]) == (2, 1, 7, 4)
    assert status["returnMean"] == 4.0 and status["lengthMean"] == 5.0
    assert round(status["returnLow"], 3) == round(4.0 - 2.598, 3) and round(status["returnHigh"], 3) == 6.598
    assert status["evaluatedAt"] == "1970-01-01T00:00:00Z"
    assert status["message"] == (
        "version 7: return 4 ± 2.598 (95 % CI, 4 episodes), length 5; evaluation worker 1 ended: spec.env: no such env"
    )
    nothing = evaluation_status(the_job, [], None, 0.0)["evaluation"]
    assert nothing["version"] is None and nothing["message"] == "no weights version judged yet"
    assert evaluation_status(job(), [], latest, 0.0) == {"evaluation": None}

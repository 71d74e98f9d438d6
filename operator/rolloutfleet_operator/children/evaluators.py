"""Evaluation pods of a RolloutJob (``spec.evaluation``): built, recognised, planned, reported.

Pure, like :mod:`.pods` and :mod:`.plan`. An evaluation pod is a worker pod (same builder:
image, resources, placement, Redis password) named ``<job>-eval-<i>``, labelled
``app.kubernetes.io/component: evaluator`` and ``rolloutfleet.io/evaluator-index``, with
``ROLLOUTFLEET_ROLE=evaluator``: the worker entrypoint then plays evaluation episodes
instead of publishing batches (:mod:`rolloutfleet.evaluation.evaluator`). They are outside
the worker count, the scale subresource's selector and the PodDisruptionBudget; they spend
no restart budget. A failed one is replaced after :data:`RETRY_S` (never a tight loop), and
one that exited 3 (a spec, env or policy it cannot use) stays down until the spec changes,
its reason in ``status.evaluation.message``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from rolloutfleet.evaluation.confidence import VersionSummary
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import GROUP, HASH_ANNOTATION, INDEX_LABEL, PodView, build_pod, template_hash
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.plan import parse_time

EVALUATOR_INDEX_LABEL = f"{GROUP}/evaluator-index"
COMPONENT = "evaluator"
ROLE_ENV = {"name": "ROLLOUTFLEET_ROLE", "value": "evaluator"}
PORT_INDEX_OFFSET = 64
"""With one metrics port per index (one host: the test kubelet), evaluator i takes index 64 + i's."""
RETRY_S = 30.0
"""A failed evaluation pod is replaced this long after it ended."""
EXIT_BAD_SPEC = 3


def evaluator_name(job_name: str, index: int) -> str:
    return f"{job_name}-eval-{index}"


def evaluator_hash(job: RolloutJob, config: OperatorConfig) -> str:
    """The workers' template hash and ``spec.evaluation``: an evaluation pod is stale when either changes."""
    evaluation = job.spec.evaluation.model_dump(mode="json") if job.spec.evaluation is not None else None
    material = json.dumps({"workers": template_hash(job, config), "evaluation": evaluation}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def build_evaluator_pod(job: RolloutJob, uid: str, index: int, config: OperatorConfig, hash_: str) -> dict[str, Any]:
    """Evaluation pod ``index`` of ``job``: :func:`.pods.build_pod`'s pod, renamed and relabelled,
    told its role, its place among the evaluation workers and its port."""
    assert job.spec.evaluation is not None
    pod = build_pod(job, uid, index, config, hash_)
    meta = pod["metadata"]
    meta["name"] = evaluator_name(job.name, index)
    labels = {k: v for k, v in meta["labels"].items() if k != INDEX_LABEL}
    meta["labels"] = {**labels, "app.kubernetes.io/component": COMPONENT, EVALUATOR_INDEX_LABEL: str(index)}
    meta["annotations"][HASH_ANNOTATION] = hash_
    container = pod["spec"]["containers"][0]
    port = config.metrics_port(PORT_INDEX_OFFSET + index)
    told = {"ROLLOUTFLEET_NUM_WORKERS": str(job.spec.evaluation.workers), "ROLLOUTFLEET_METRICS_PORT": str(port)}
    container["env"] = [{**var, "value": told[var["name"]]} if var["name"] in told else var for var in container["env"]]
    container["env"].append(dict(ROLE_ENV))
    container["ports"] = [{"name": "metrics", "containerPort": port, "protocol": "TCP"}]  # no external env port
    for probe in ("readinessProbe", "livenessProbe"):
        container[probe]["httpGet"]["port"] = port
    return pod


def evaluator_view(pod: Mapping[str, Any]) -> PodView | None:
    """The view of an evaluation pod of ours (its index from its own label); None for any other pod."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if EVALUATOR_INDEX_LABEL not in labels or INDEX_LABEL in labels:
        return None
    relabelled = {**pod, "metadata": {**metadata, "labels": {**labels, INDEX_LABEL: labels[EVALUATOR_INDEX_LABEL]}}}
    view = PodView.from_pod(relabelled)
    return None if view is None else replace(view, role=COMPONENT)


def plan_evaluators(
    job: RolloutJob, pods: Iterable[PodView], current_hash: str, active: bool, now: float
) -> tuple[list[int], list[tuple[str, str]]]:
    """(indexes to create, (pod name, why) to delete). ``active``: the job runs (not suspended,
    admitted by Kueue); else no evaluation pod is kept."""
    desired = job.spec.evaluation.workers if job.spec.evaluation is not None and active else 0
    deletes: list[tuple[str, str]] = []
    present: set[int] = set()
    for pod in pods:
        present.add(pod.index)
        if pod.deleting:
            continue
        if pod.index >= desired:
            deletes.append((pod.name, "not wanted (spec.evaluation.workers, suspended or removed)"))
        elif pod.template_hash != current_hash:
            deletes.append((pod.name, "spec changed"))
        elif pod.terminated and pod.exit_code != EXIT_BAD_SPEC:
            finished = parse_time(pod.finished_at)
            if finished is None or now - finished >= RETRY_S:
                deletes.append((pod.name, f"evaluation worker ended ({pod.reason or pod.phase}): replaced"))
    return [index for index in range(desired) if index not in present], deletes


def evaluation_status(
    job: RolloutJob, pods: Iterable[PodView], latest: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """``{"evaluation": ...}`` for the job's status (null without ``spec.evaluation``, so that a
    merge patch removes it): the evaluation pods, and the newest version's numbers."""
    if job.spec.evaluation is None:
        return {"evaluation": None}
    desired = job.spec.evaluation.workers
    live = [p for p in pods if p.index < desired and not p.deleting]
    failed = sorted((p for p in live if p.terminated), key=lambda p: p.index)
    summary = _summary(latest)
    status: dict[str, Any] = {
        "workers": desired,
        "readyWorkers": sum(1 for p in live if p.ready and not p.terminated),
        "version": None if summary is None else summary.version,
        "episodes": None if summary is None else summary.episodes,
        "returnMean": None if summary is None else summary.return_mean,
        "returnLow": None if summary is None or summary.return_low != summary.return_low else summary.return_low,
        "returnHigh": None if summary is None or summary.return_high != summary.return_high else summary.return_high,
        "lengthMean": None if summary is None else summary.length_mean,
        "evaluatedAt": _timestamp(latest),
    }
    words = "no weights version judged yet" if summary is None else summary.describe()
    if failed:
        first = failed[0]
        why = first.message or first.reason or f"exit code {first.exit_code}"
        words += f"; evaluation worker {first.index} ended: {why}"
    status["message"] = words
    return {"evaluation": status}


def _summary(latest: Mapping[str, Any] | None) -> VersionSummary | None:
    if latest is None:
        return None
    try:
        return VersionSummary.from_json(latest)
    except (KeyError, ValueError, TypeError):
        return None


def _timestamp(latest: Mapping[str, Any] | None) -> str | None:
    at = (latest or {}).get("evaluated_at")
    if not isinstance(at, int | float):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))

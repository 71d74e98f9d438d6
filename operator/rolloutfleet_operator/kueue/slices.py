"""An elastic job's Workload slices (Kueue's KEP-77, as its jobframework keeps them for
its own jobs). Pure. The Workloads of one shape (:data:`.admission.SHAPE_LABEL`) are one
admission that changes size: a scale-down lowers the admitted slice's count in place, a
scale-up (or a shrink below the admitted ``minCount``) is a replacement slice that Kueue
admits for the difference before it finishes the old one; workers run up to what the
admitted slice allows. The module docstring of :mod:`.admission` has the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rolloutfleet_operator.kueue import admission


def decide_elastic(
    wanted: dict[str, Any], existing: Iterable[Mapping[str, Any]], pods_left: bool, now: float
) -> admission.Decision:
    """:func:`decide` for an elastic job (``wanted`` from ``build_workload(elastic=True)``).
    The Workloads of its shape are one or two slices: the current one and, while a
    scale-up waits, its replacement. Workers may run up to the count of the admitted one
    (``admitted_count``); the rest wait in Kueue's words (``scale_up``)."""
    shape, want = wanted["metadata"]["labels"][admission.SHAPE_LABEL], admission.pod_count(wanted)
    alive = [w for w in existing if w["metadata"].get("deletionTimestamp") is None]
    slices = [w for w in alive if (w["metadata"].get("labels") or {}).get(admission.SHAPE_LABEL) == shape]
    live_slices = sorted((w for w in slices if not admission.is_finished(w)), key=_slice_number)
    decision = admission.Decision()
    handing_over = _handing_over(slices, live_slices, now)
    decision.delete = [w["metadata"]["name"] for w in slices if admission.is_finished(w) and w is not handing_over]
    if handing_over is not None:  # Kueue finished the old slice and is admitting its replacement
        decision.admitted = dict(handing_over)
        decision.admitted_count = min(want, admission.admitted_pods(handing_over))
        decision.scale_up = admission.Waiting("Admitting", f"Kueue is admitting {live_slices[-1]['metadata']['name']}")
    elif not live_slices:
        decision.create = _slice(wanted, _next_number(slices), None, 0)
        name, queue = decision.create["metadata"]["name"], wanted["spec"]["queueName"]
        decision.waiting = admission.Waiting("Pending", f"creating workload {name} in LocalQueue {queue}")
        decision.admitted_count = 0
    elif (admitted := next((w for w in reversed(live_slices) if admission.is_admitted(w)), None)) is not None:
        _admitted(decision, wanted, admitted, [w for w in live_slices if w is not admitted], want, slices)
    else:
        _not_admitted(decision, live_slices, want, pods_left)
    if decision.admitted is not None or not pods_left:  # another shape (new requests, queue): queued anew
        decision.delete += [w["metadata"]["name"] for w in alive if w not in slices]
    return decision


HANDOVER_S = 30.0
"""How long the workers of a slice Kueue finished for its replacement keep running while the
replacement is not yet seen admitted (Kueue finishes the old slice, then admits the new)."""


def _handing_over(
    slices: list[Mapping[str, Any]], live_slices: list[Mapping[str, Any]], now: float
) -> Mapping[str, Any] | None:
    """The slice Kueue finished as replaced (within :data:`HANDOVER_S`) while no live slice
    is admitted yet: its admission still stands for the workers it had."""
    if not live_slices or any(admission.is_admitted(w) for w in live_slices):
        return None
    for workload in slices:
        finished = admission._condition(workload, "Finished")
        if finished is None or finished.get("status") != "True" or finished.get("reason") != admission.SLICE_REPLACED:
            continue
        key = f"{workload['metadata']['namespace']}/{workload['metadata']['name']}"
        replaced_for = any(
            (w["metadata"].get("annotations") or {}).get(admission.REPLACEMENT_FOR) == key for w in live_slices
        )
        if replaced_for and now - _timestamp(finished.get("lastTransitionTime")) < HANDOVER_S:
            return workload
    return None


def _timestamp(text: Any) -> float:
    try:
        return datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def _admitted(
    decision: admission.Decision,
    wanted: dict[str, Any],
    admitted: Mapping[str, Any],
    rest: list[Mapping[str, Any]],
    want: int,
    slices: list[Mapping[str, Any]],
) -> None:
    """An admitted slice: shrunk in place, or replaced by a slice of the wanted size (to
    grow; or to shrink below the ``minCount`` Kueue keeps fixed while it is admitted)."""
    decision.admitted = dict(admitted)
    key = f"{admitted['metadata']['namespace']}/{admitted['metadata']['name']}"
    replacements = [w for w in rest if (w["metadata"].get("annotations") or {}).get(admission.REPLACEMENT_FOR) == key]
    # A slice older than the admitted one (its replacement admitted, not yet finished by Kueue): the newer holds it all.
    decision.delete += [w["metadata"]["name"] for w in rest if w not in replacements]
    have, asked = admission.admitted_pods(admitted), admission.pod_count(admitted)
    decision.admitted_count = min(want, have)
    if want <= have and (want == asked or want >= _min_count(admitted)):
        decision.delete += [w["metadata"]["name"] for w in replacements]  # a scale-up no longer wanted
        if want < asked:
            decision.resize = (dict(admitted), want)
        return
    if not replacements:
        decision.create = _slice(wanted, _next_number(slices), key, have)
        if want > have:
            more = f"workload {decision.create['metadata']['name']} asks Kueue for {want - have} more worker(s)"
            decision.scale_up = admission.Waiting("Pending", more)
        return
    replacement, *extra = replacements
    decision.delete += [w["metadata"]["name"] for w in extra]
    if admission.pod_count(replacement) != want:
        decision.resize = (dict(replacement), want)  # not admitted: its count may change
    if want > have:
        decision.scale_up = admission.waiting_for(replacement)


def _min_count(workload: Mapping[str, Any]) -> int:
    return int(workload["spec"]["podSets"][0].get("minCount") or 0)


def _not_admitted(
    decision: admission.Decision, live_slices: list[Mapping[str, Any]], want: int, pods_left: bool
) -> None:
    """No slice admitted: no workers. An evicted slice hands its quota back once its pods
    are gone (its replacement, if any, then queues alone); a waiting one follows the count."""
    *older, current = live_slices
    decision.admitted_count = 0
    evicted = next((w for w in live_slices if admission._true(w, "Evicted")), None)
    if older and not pods_left:
        decision.delete += [w["metadata"]["name"] for w in older]
    if evicted is not None and evicted is current and admission.holds_quota(current) and not pods_left:
        decision.requeue.append(dict(current))
    decision.waiting = admission.waiting_for(evicted if evicted is not None and pods_left else current)
    decision.evicted = admission.eviction(evicted) if evicted is not None else None
    if not admission.holds_quota(current) and admission.pod_count(current) != want:
        decision.resize = (dict(current), want)


def _slice(wanted: Mapping[str, Any], number: int, replaces: str | None, have: int) -> dict[str, Any]:
    """``wanted`` named as slice ``number`` of its shape, replacing the slice ``replaces``
    that admits ``have`` workers. Its ``minCount`` lets Kueue admit part of it (its partial
    admission): at least one worker more than ``have``, as many as the quota holds."""
    annotations = dict(wanted["metadata"].get("annotations") or {})
    if replaces is not None:
        annotations[admission.REPLACEMENT_FOR] = replaces
    metadata = {**wanted["metadata"], "name": f"{wanted['metadata']['name']}-{number}", "annotations": annotations}
    pod_sets = [dict(ps) for ps in wanted["spec"]["podSets"]]
    if pod_sets[0]["count"] > have + 1:
        pod_sets[0]["minCount"] = have + 1
    return {**wanted, "metadata": metadata, "spec": {**wanted["spec"], "podSets": pod_sets}}


def _slice_number(workload: Mapping[str, Any]) -> int:
    suffix = workload["metadata"]["name"].rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def _next_number(slices: Iterable[Mapping[str, Any]]) -> int:
    return 1 + max((_slice_number(w) for w in slices), default=0)

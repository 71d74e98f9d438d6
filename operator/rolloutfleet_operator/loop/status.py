"""A RolloutJob's status, from a plan and what the operator observed. Pure.

``phase`` is one of Pending (no worker ready yet, none failed), Running (all desired
workers ready), Degraded (some missing, failing or backing off), Suspended, Queued
(waiting for Kueue to admit it: no workers, Kueue's own words as the message), Failed
(the restart budget is spent, or the spec cannot be used). Conditions follow
metav1.Condition: ``Ready``, ``Degraded`` and ``Failed``, each with a reason, a message
and the generation it describes; ``lastTransitionTime`` moves only when the condition's
status changes. ``WaitingForLearner`` joins them once ready workers wait for a learner (a
full ``block`` stream nobody reads, from their heartbeats): True since the wait began, the
reason of a Running job; it stays, False, after the wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rolloutfleet.league.standings import Standings
from rolloutfleet.rules.missing_modules import stays_down
from rolloutfleet.rules.refusals import refused_line, refused_versions
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet_operator.children.disruptions import KINDS
from rolloutfleet_operator.children.pods import PodView, selector
from rolloutfleet_operator.loop.plan import Plan

HEARTBEAT_FRESH_S = 30.0


def _timestamp(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    status: bool,
    reason: str,
    message: str,
    generation: int,
    now: float,
    previous: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    value = "True" if status else "False"
    old = next((c for c in previous if c.get("type") == type_), None)
    moved = old is None or old.get("status") != value
    return {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": _timestamp(now)
        if old is None or moved
        else old.get("lastTransitionTime", _timestamp(now)),
    }


def progress(beats: Mapping[int, Mapping[str, float]], desired: int, now: float) -> tuple[int, float]:
    """(env steps sampled by the current workers, their steps/s from fresh heartbeats)."""
    steps = sum(int(b.get("env_steps", 0)) for i, b in beats.items() if i < desired)
    rate = sum(
        float(b.get("steps_per_s", 0.0))
        for i, b in beats.items()
        if i < desired and now - float(b.get("time", 0.0)) <= HEARTBEAT_FRESH_S
    )
    return steps, round(rate, 1)


NONFINITE = {"observations": "nonfinite_obs", "rewards": "nonfinite_rewards", "filterQuarantined": "filter_quarantined"}
"""``status.nonFinite`` field -> the heartbeat count it sums."""


def nonfinite(beats: Mapping[int, Mapping[str, float]], desired: int) -> dict[str, int]:
    """Rows with NaN/inf observations or rewards, and observations kept out of the shared
    filter statistics, summed over the current workers' lifetimes; empty when all are 0."""
    counts = {
        field: sum(int(b.get(name, 0)) for i, b in beats.items() if i < desired) for field, name in NONFINITE.items()
    }
    return counts if any(counts.values()) else {}


def weights_refused(beats: Mapping[int, Mapping[str, Any]], desired: int) -> list[dict[str, Any]]:
    """Weights versions the current workers refused (keeping the weights they hold), one
    entry per policy and version, while they hold no newer one; empty when none."""
    return [
        {"policy": policy, "version": seq, "workers": workers, "reason": reason,
         "message": refused_line(policy, seq, workers, reason)}
        for policy, seq, workers, reason in refused_versions(beats, desired)
    ]  # fmt: skip


def build_status(
    job_name: str,
    suspended: bool,
    the_plan: Plan,
    pods: Iterable[PodView],
    generation: int,
    now: float,
    previous: Mapping[str, Any] | None = None,
    beats: Mapping[int, Mapping[str, Any]] | None = None,
    namespace: str = "default",
    queued: tuple[str, str] | None = None,
    image: str | None = None,
    scale_up: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """``queued``: (reason, message) while Kueue has not admitted the job; ``scale_up``: the
    same for the workers past what Kueue admitted to an elastic job; ``image``: its workers'."""
    desired = the_plan.desired
    live = [p for p in pods if p.index < desired and not p.terminated and not p.deleting]
    ready = sum(1 for p in live if p.ready)
    restarts = sum(r.restarts for r in the_plan.records.values())
    phase, reason, message = (
        ("Queued", *queued) if queued and not suspended else _phase(suspended, the_plan, ready, restarts)
    )
    if phase in ("Pending", "Degraded"):
        reason, message = _waiting(live, reason, message, phase)
    degraded = bool(the_plan.backing_off or the_plan.down) or (phase == "Degraded")
    old_conditions = (previous or {}).get("conditions") or []
    waiting = learner_wait(beats or {}, live, desired, job_keys(namespace, job_name).batches, now)
    if waiting is not None and phase in ("Running", "Degraded"):
        message += "; " + waiting[1]
        reason = "WaitingForLearner" if phase == "Running" else reason
    if scale_up is not None and phase in ("Running", "Degraded", "Pending"):
        message += "; " + scale_up[1]
        reason = scale_up[0] if phase == "Running" else reason
    steps, rate = progress(beats or {}, desired, now)
    return {
        "phase": phase,
        "reason": reason,
        "message": message,
        "replicas": len(live),
        "readyReplicas": ready,
        "desiredReplicas": desired,
        "restarts": restarts,
        # Evictions, preemptions, lost nodes, deletes by hand: never counted in restarts.
        "disruptions": {kind: the_plan.disruptions.get(kind, 0) for kind in KINDS},
        "observedGeneration": generation,
        "selector": selector(job_name),
        "image": image,
        "workers": {str(i): r.to_status() for i, r in sorted(the_plan.records.items())},
        "envSteps": steps,
        "stepsPerSecond": rate,
        **({"nonFinite": counts} if (counts := nonfinite(beats or {}, desired)) else {}),
        # null (not absent) once none is refused, so that a merge patch removes it
        "weightsRefused": weights_refused(beats or {}, desired) or None,
        "conditions": _conditions(phase, reason, message, degraded, generation, now, old_conditions)
        + _learner_condition(waiting, generation, now, old_conditions),
    }


def _phase(suspended: bool, the_plan: Plan, ready: int, restarts: int) -> tuple[str, str, str]:
    """(phase, reason, message), before saying why workers wait."""
    desired, down, backing_off = the_plan.desired, the_plan.down, the_plan.backing_off
    if suspended:
        return "Suspended", "Suspended", "spec.suspend is true: no worker pods"
    if down:
        last = the_plan.records[down[0]]
        if last.lacks_module:
            reason = stays_down(3, last.last_error) or "MissingModule"
            return "Failed", reason, f"worker(s) {_list(down)} down until the spec changes: {last.last_error}"
        message = f"worker(s) {_list(down)} down for good after {restarts} restarts; last error: {last.last_error}"
        return "Failed", "RestartBudgetExhausted", message
    if ready == desired:
        return "Running", "AllWorkersReady", f"{ready}/{desired} workers ready"
    if ready == 0 and restarts == 0:
        return "Pending", "WorkersStarting", f"0/{desired} workers ready"
    message = f"{ready}/{desired} workers ready"
    if backing_off:
        last = the_plan.records[backing_off[0]]
        message += f"; worker(s) {_list(backing_off)} restarting after: {last.last_error}"
    return "Degraded", "WorkersNotReady", message


def _conditions(
    phase: str,
    reason: str,
    message: str,
    degraded: bool,
    generation: int,
    now: float,
    old: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    failed = phase == "Failed"
    return [
        condition("Ready", phase == "Running", reason, message, generation, now, old),
        condition("Degraded", degraded, reason if degraded else "Healthy", message, generation, now, old),
        condition(
            "Failed",
            failed,
            reason if failed else "NoFailure",
            message if failed else "no failure",
            generation,
            now,
            old,
        ),
    ]


def invalid_spec_status(
    job_name: str, error: str, generation: int, now: float, previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    old = (previous or {}).get("conditions") or []
    return {
        "phase": "Failed",
        "reason": "InvalidSpec",
        "message": error,
        "observedGeneration": generation,
        "selector": selector(job_name),
        "conditions": [
            condition("Ready", False, "InvalidSpec", error, generation, now, old),
            condition("Degraded", True, "InvalidSpec", error, generation, now, old),
            condition("Failed", True, "InvalidSpec", error, generation, now, old),
        ],
    }


def league_status(league: object | None, standings: Standings | None) -> dict[str, Any]:
    """``{"league": ...}`` for the job's status (null without ``spec.league``, so that a merge
    patch removes it): the standings the learner published last (top policies by Elo, the
    main agent's rating), or why there are none."""
    if league is None:
        return {"league": None}
    if standings is None:
        empty = dict.fromkeys(("main", "mainRating", "mainRank", "snapshots", "matches", "top", "updatedAt"))
        message = (
            "no standings yet: the learner publishes them (PolicyStore.publish_standings, publish_matchmaker_plan)"
        )
        return {"league": {**empty, "message": message}}
    return {"league": standings.status()}


def status_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether patching ``new`` into the stored status ``old`` would change it."""
    # A null in a merge patch deletes the key, so the stored status has no key where
    # ours says null: compare without nulls, or every reconcile would patch again.
    return any(_without_nulls(old.get(k)) != _without_nulls(v) for k, v in new.items())


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _waiting(live: list[PodView], reason: str, message: str, phase: str) -> tuple[str, str]:
    """Say why workers wait (no node fits, the image does not pull, a Secret is missing):
    by reason, most common first. A Pending job takes the most common reason as its own."""
    by_reason: dict[str, list[PodView]] = {}
    for pod in live:
        if not pod.ready and pod.waiting_reason:
            by_reason.setdefault(pod.waiting_reason, []).append(pod)
    if not by_reason:
        return reason, message
    groups = sorted(by_reason.items(), key=lambda item: (-len(item[1]), item[0]))
    for why, pods in groups[:2]:
        detail = f"{why}: {pods[0].waiting_message}" if pods[0].waiting_message else why
        message += f"; worker(s) {_list(sorted(p.index for p in pods))} waiting: {detail}"
    return (groups[0][0] if phase == "Pending" else reason), message


def _list(indexes: list[int], limit: int = 5) -> str:
    shown = ", ".join(str(i) for i in indexes[:limit])
    return shown + (f" and {len(indexes) - limit} more" if len(indexes) > limit else "")


def learner_wait(
    beats: Mapping[int, Mapping[str, Any]], live: Iterable[PodView], desired: int, stream: str, now: float
) -> tuple[float, str] | None:
    """(since, message) while ready current workers wait for a learner, by their fresh
    heartbeats (a worker that waits refreshes it every 10 s): since the earliest began.

    >>> beat = {"waiting_for_learner_since": 100.0, "time": 130.0}
    >>> view = PodView(name="j-worker-0", uid="u", index=0, template_hash="h", phase="Running", ready=True)
    >>> learner_wait({0: beat}, [view], 2, "rolloutfleet:{default/j}:batches", now=140.0)
    (100.0, '1/2 workers waiting for a learner to read rolloutfleet:{default/j}:batches since 1970-01-01T00:01:40Z')
    """
    ready = {p.index for p in live if p.ready and p.index < desired}
    since = [
        float(beat["waiting_for_learner_since"])
        for index, beat in beats.items()
        if index in ready
        and float(beat.get("waiting_for_learner_since", 0) or 0) > 0
        and now - float(beat.get("time", 0.0)) <= HEARTBEAT_FRESH_S
    ]
    if not since:
        return None
    first = min(since)
    return first, f"{len(since)}/{desired} workers waiting for a learner to read {stream} since {_timestamp(first)}"


def _learner_condition(
    waiting: tuple[float, str] | None, generation: int, now: float, old: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``WaitingForLearner``: True since the wait began; once there, False after it (absent
    for a job that never waited)."""
    old = list(old)
    if waiting is not None:
        since, message = waiting
        return [condition("WaitingForLearner", True, "WaitingForLearner", message, generation, since, old)]
    if not any(c.get("type") == "WaitingForLearner" for c in old):
        return []
    return [
        condition("WaitingForLearner", False, "NotWaiting", "no ready worker waits for a learner", generation, now, old)
    ]


CONNECTIONS = "RedisConnectionsFit"


def connections_condition(
    most: int, connected: int, per_worker: int, desired: int, live: int, generation: int, now: float,
    previous: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:  # fmt: skip
    """``RedisConnectionsFit``: whether ``desired`` workers of ``per_worker`` connections each, and
    the clients that are not the job's (``connected`` less ``live`` workers' share), fit the
    Redis's ``maxclients`` (``most``). Past it, the workers over the limit are refused at
    connect, wait and retry, and sample nothing.

    >>> print(connections_condition(10_000, 120, 2, 6_000, 50, 1, 0.0)["message"])
    6000 workers x 2 connections = 12000, and 20 other clients, pass the Redis's maxclients of 10000: the workers over it are refused at connect and sample nothing; raise maxclients (the chart's redis.maxClients) and its file-descriptor limit, shard the job (a Redis Cluster), or lower spec.replicas
    """
    needed = desired * per_worker
    others = max(0, connected - live * per_worker)
    fits = needed + others <= most
    if fits:
        message = f"{desired} workers x {per_worker} connections = {needed}, and {others} other clients, fit the Redis's maxclients of {most}"  # fmt: skip
    else:
        message = (
            f"{desired} workers x {per_worker} connections = {needed}, and {others} other clients, pass the Redis's "
            f"maxclients of {most}: the workers over it are refused at connect and sample nothing; raise maxclients "
            "(the chart's redis.maxClients) and its file-descriptor limit, shard the job (a Redis Cluster), or "
            "lower spec.replicas"
        )
    reason = "WithinMaxClients" if fits else "OverMaxClients"
    return condition(CONNECTIONS, fits, reason, message, generation, now, previous)


REACHABLE = "RedisReachable"


def reachable_condition(
    error: str | None, generation: int, now: float, previous: Iterable[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """``RedisReachable``: whether the operator's last look reached the job's Redis as the job's
    users do; else why not, in the one line a worker would log (connection refused, TLS
    expected, a password refused). Workers that cannot reach it are never ready and write no
    heartbeat, so this is where their reason shows.

    >>> reachable_condition("redis at localhost:6379: connection refused", 1, 0.0)["reason"]
    'RedisUnreachable'
    """
    if error is None:
        return condition(REACHABLE, True, "Reached", "the operator reached the job's Redis", generation, now, previous)
    message = f"{error} (seen by the operator, which connects as the job's workers and learners do)"
    return condition(REACHABLE, False, "RedisUnreachable", message, generation, now, previous)


def redis_conditions(
    looked: bool, error: str | None, limit: Any, per_worker: int, desired: int, live: int, generation: int,
    now: float, old: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:  # fmt: skip
    """What the operator's own look at the job's Redis found (none before the first look):
    reached or why not, and with its connection budget (``limit``: a ``ClientLimit``, None
    for a Redis Cluster or one never read) whether the fleet fits it."""
    if not looked:
        return []
    old = list(old)
    found = [reachable_condition(error, generation, now, old)]
    if limit is not None:
        found.append(
            connections_condition(limit.most, limit.connected, per_worker, desired, live, generation, now, old)
        )
    return found

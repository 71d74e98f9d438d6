"""The operator's own Prometheus metrics (served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

RECONCILE_SECONDS = Histogram(
    "rolloutfleet_operator_reconcile_seconds",
    "Time of one reconcile of one RolloutJob (plan, status, pod creates and deletes)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
PODS_CREATED = Counter("rolloutfleet_operator_pods_created_total", "Worker pods created")
PODS_DELETED = Counter("rolloutfleet_operator_pods_deleted_total", "Worker pods deleted, by why", ["why"])
WORKER_FAILURES = Counter(
    "rolloutfleet_operator_worker_failures_total", "Worker pod failures counted against restart budgets"
)
WORKER_DISRUPTIONS = Counter(
    "rolloutfleet_operator_worker_disruptions_total",
    "Worker pods disrupted (evicted, preempted, on a lost node, deleted), by kind: never counted against restart budgets",
    ["kind"],
)

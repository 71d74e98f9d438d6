"""The operator's own Prometheus metrics (served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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

# The autoscaler's signals (spec.autoscaling), per job: what it decides by, for dashboards,
# or for an HPA / KEDA through a Prometheus adapter instead of spec.autoscaling.
_JOB = ["namespace", "job_name"]
LEARNER_STARVED = Gauge(
    "rolloutfleet_learner_starved_ratio",
    "Share of the learner's time its get()/read() waited for rows, over the autoscaler's window",
    _JOB,
)
WORKERS_BLOCKED = Gauge(
    "rolloutfleet_workers_blocked_ratio",
    "Share of the workers' time their publishes waited for room (block backpressure), over the window",
    _JOB,
)
LEARNER_ROWS = Gauge("rolloutfleet_learner_rows_per_second", "Rows the learner groups consumed per second", _JOB)
WORKER_ROWS = Gauge("rolloutfleet_worker_rows_per_second", "Rows one worker makes per second (sampling speed)", _JOB)
DESIRED_REPLICAS = Gauge("rolloutfleet_autoscaler_desired_replicas", "Workers the autoscaler keeps", _JOB)
SCALE_CHANGES = Counter(
    "rolloutfleet_autoscaler_changes_total", "Changes of the number of workers by the autoscaler", _JOB
)

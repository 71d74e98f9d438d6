"""The operator's own Prometheus metrics (served on ``--metrics-port``)."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_SECONDS = Histogram(
    "rolloutfleet_operator_reconcile_seconds",
    "Time of one reconcile of one RolloutJob (plan, status, pod creates and deletes)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
PODS_CREATED = Counter("rolloutfleet_operator_pods_created_total", "Worker pods created")
PODS_DELETED = Counter("rolloutfleet_operator_pods_deleted_total", "Worker pods deleted, by why", ["why"])
WORKER_FAILURES = Counter(
    "rolloutfleet_operator_worker_failures_total",
    "Worker pod failures counted against restart budgets, by job",
    ["namespace", "job_name"],
)
JOB_RESTARTS = Gauge(
    "rolloutfleet_operator_job_restarts",
    "Worker restarts the job has spent of its budget (status.restarts)",
    ["namespace", "job_name"],
)
JOB_MAX_RESTARTS = Gauge(
    "rolloutfleet_operator_job_max_restarts",
    "The job's restart budget (spec.restartPolicy.maxRestarts)",
    ["namespace", "job_name"],
)
RECONCILE_ERRORS = Counter(
    "rolloutfleet_operator_reconcile_errors_total", "Reconcile rounds that raised (kopf retries them)"
)
WORKER_DISRUPTIONS = Counter(
    "rolloutfleet_operator_worker_disruptions_total",
    "Worker pods disrupted (evicted, preempted, on a lost node, deleted), by kind: never counted against restart budgets",
    ["kind"],
)


def record_budget(namespace: str, job_name: str, restarts: int, max_restarts: int) -> None:
    """The job's restart budget and what it has spent, after each reconcile."""
    JOB_RESTARTS.labels(namespace=namespace, job_name=job_name).set(restarts)
    JOB_MAX_RESTARTS.labels(namespace=namespace, job_name=job_name).set(max_restarts)


def forget_job(namespace: str, job_name: str) -> None:
    """Drop a deleted job's series (nothing to do for a job never recorded)."""
    for gauge in (JOB_RESTARTS, JOB_MAX_RESTARTS):
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, job_name)
    set_stream_series(namespace, job_name, {})


# A job's batch streams and their consumer groups, read from Redis on the operator's timer
# (.stream_metrics): per job, not per pod. policy: a multi-agent job's policy id, else "".
_STREAM = ["namespace", "job_name", "policy"]
STREAM_ENTRIES = Gauge(
    "rolloutfleet_operator_stream_entries", "Entries in the job's batch stream (XLEN, summed over its shards)", _STREAM
)
GROUP_LAG = Gauge(
    "rolloutfleet_operator_consumer_group_lag",
    "Stream entries not yet delivered to the consumer group (XINFO GROUPS lag, over the shards); absent while "
    "Redis cannot tell",
    [*_STREAM, "group"],
)
GROUP_PENDING = Gauge(
    "rolloutfleet_operator_consumer_group_pending",
    "Entries delivered to the group's consumers and not acknowledged yet (XINFO GROUPS pending, over the shards)",
    [*_STREAM, "group"],
)
GROUP_ENTRIES_READ = Gauge(
    "rolloutfleet_operator_consumer_group_entries_read",
    "Entries the group has read since the stream began (XINFO GROUPS entries-read, over the shards; its rate is "
    "the learner's intake); absent while Redis cannot tell",
    [*_STREAM, "group"],
)
StreamSeries = tuple[Gauge, tuple[str, ...]]  # a gauge and its label values after namespace and job_name
_stream_series: dict[tuple[str, str], set[StreamSeries]] = {}


def set_stream_series(namespace: str, job_name: str, values: dict[StreamSeries, float]) -> None:
    """Set the job's stream gauges to ``values`` and drop its series missing from them (a group
    destroyed, a Redis that could not be read: a gap on the graph, not a frozen number)."""
    key = (namespace, job_name)
    for gauge, labels in _stream_series.pop(key, set()) - values.keys():
        with contextlib.suppress(KeyError):
            gauge.remove(namespace, job_name, *labels)
    for (gauge, labels), value in values.items():
        gauge.labels(namespace, job_name, *labels).set(value)
    if values:
        _stream_series[key] = set(values)


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

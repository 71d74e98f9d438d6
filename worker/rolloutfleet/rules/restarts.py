"""When to restart a failed worker: exponential backoff per worker, one budget per job.

The same rules for the local fleet (``rolloutfleet run``) and the Kubernetes operator,
from ``spec.restartPolicy``:

* every restart of any worker counts against ``maxRestarts`` (the job's budget, like a
  Kubernetes Job's ``backoffLimit``); once spent, failed workers stay down and the job
  says why, instead of crash-looping;
* a worker that fails again soon after a restart waits longer: ``backoffSeconds`` doubled
  per consecutive failure, capped at ``backoffLimitSeconds``;
* a worker that stayed up for ``backoffLimitSeconds`` (or at least 10 s) is healthy again:
  its next failure restarts after the base backoff.

Pure logic, no clock of its own: callers pass ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rolloutfleet.spec.job import RestartPolicySpec

_MIN_HEALTHY_SECONDS = 10.0


def backoff_delay(policy: RestartPolicySpec, consecutive_failures: int) -> float:
    """Seconds to wait before the restart following ``consecutive_failures`` failures (>= 1)."""
    if consecutive_failures < 1:
        return 0.0
    limit, base = policy.backoff_limit_seconds, policy.backoff_seconds
    exponent = consecutive_failures - 1
    if base == 0:
        return 0.0
    if exponent > 1023:  # 2.0**1024 is no float (OverflowError); any finite limit was reached long before
        return float(limit)
    return float(min(limit, base * 2.0**exponent))  # a product past the largest float is inf: the limit


@dataclass
class WorkerRestarts:
    restarts: int = 0
    consecutive_failures: int = 0
    started_at: float = 0.0
    restart_at: float | None = None  # when a pending restart may happen


@dataclass
class RestartTracker:
    """Restart bookkeeping of one job's workers.

    >>> tracker = RestartTracker(RestartPolicySpec(maxRestarts=1, backoffSeconds=2))
    >>> tracker.started(0, now=0.0)
    >>> tracker.failed(0, now=1.0)
    3.0
    >>> tracker.failed(1, now=1.0) is None   # the budget is spent
    True
    """

    policy: RestartPolicySpec
    workers: dict[int, WorkerRestarts] = field(default_factory=dict)

    @property
    def total_restarts(self) -> int:
        return sum(w.restarts for w in self.workers.values())

    @property
    def budget_spent(self) -> bool:
        return self.total_restarts >= self.policy.max_restarts

    def started(self, index: int, now: float) -> None:
        worker = self.workers.setdefault(index, WorkerRestarts())
        worker.started_at = now
        worker.restart_at = None

    def failed(self, index: int, now: float) -> float | None:
        """A worker exited unexpectedly: when it may restart, or None if the budget is spent."""
        worker = self.workers.setdefault(index, WorkerRestarts(started_at=now))
        healthy_for = max(_MIN_HEALTHY_SECONDS, self.policy.backoff_limit_seconds)
        if now - worker.started_at >= healthy_for:
            worker.consecutive_failures = 0
        if self.budget_spent:
            worker.restart_at = None
            return None
        # Counted when decided, so failures during a backoff can't overdraw the budget.
        worker.restarts += 1
        worker.consecutive_failures += 1
        worker.restart_at = now + backoff_delay(self.policy, worker.consecutive_failures)
        return worker.restart_at

    def due(self, now: float) -> list[int]:
        """Workers whose backoff has passed."""
        return sorted(i for i, w in self.workers.items() if w.restart_at is not None and w.restart_at <= now)

from __future__ import annotations

from rolloutfleet.rules.restarts import RestartTracker, backoff_delay
from rolloutfleet.spec.job import RestartPolicySpec


def test_backoff_doubles_up_to_the_limit() -> None:
    policy = RestartPolicySpec(backoffSeconds=1, backoffLimitSeconds=5)
    assert [backoff_delay(policy, n) for n in range(6)] == [0.0, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_budget_is_per_job_and_counted_when_decided() -> None:
    tracker = RestartTracker(RestartPolicySpec(maxRestarts=2, backoffSeconds=1, backoffLimitSeconds=4))
    for index in (0, 1, 2):
        tracker.started(index, now=0.0)
    assert tracker.failed(0, now=1.0) == 2.0
    assert tracker.failed(1, now=1.0) == 2.0
    assert tracker.failed(2, now=1.0) is None  # two restarts decided: the budget is spent
    assert tracker.budget_spent and tracker.total_restarts == 2
    assert tracker.due(1.5) == [] and tracker.due(2.0) == [0, 1]


def test_quick_refailures_back_off_and_a_healthy_run_resets() -> None:
    tracker = RestartTracker(RestartPolicySpec(maxRestarts=10, backoffSeconds=1, backoffLimitSeconds=8))
    tracker.started(0, now=0.0)
    assert tracker.failed(0, now=0.5) == 1.5
    tracker.started(0, now=1.5)
    assert tracker.failed(0, now=2.0) == 4.0  # second failure in a row: 2 s
    tracker.started(0, now=4.0)
    assert tracker.failed(0, now=4.5) == 8.5  # third: 4 s
    tracker.started(0, now=8.5)
    assert tracker.failed(0, now=30.0) == 31.0  # ran for 21.5 s >= 10 s: healthy again, base backoff


def test_backoff_stays_capped_for_any_number_of_consecutive_failures() -> None:
    """2 ** 1100 seconds as a float overflowed (a traceback in `run` and in the operator)."""
    policy = RestartPolicySpec(backoffSeconds=1, backoffLimitSeconds=60)
    for failures in (1024, 1025, 5000, 10**6, 10**18):
        assert backoff_delay(policy, failures) == 60.0
    huge = RestartPolicySpec(backoffSeconds=3, backoffLimitSeconds=1e300)
    assert backoff_delay(huge, 1100) == 1e300  # 3 * 2**1099 is beyond any float: the limit
    assert backoff_delay(huge, 11) == 3 * 1024.0
    zero = RestartPolicySpec(backoffSeconds=0, backoffLimitSeconds=60)
    assert backoff_delay(zero, 10**6) == 0.0


def test_a_thousand_consecutive_failures_of_one_worker_are_tracked_without_error() -> None:
    tracker = RestartTracker(RestartPolicySpec(maxRestarts=5000, backoffSeconds=1, backoffLimitSeconds=30))
    now, delays = 0.0, []
    for _ in range(3000):
        tracker.started(0, now=now)
        restart_at = tracker.failed(0, now=now + 0.5)  # fails at once, every time
        assert restart_at is not None
        delays.append(restart_at - (now + 0.5))
        now = restart_at
    assert tracker.workers[0].consecutive_failures == 3000 and tracker.total_restarts == 3000
    assert delays[:6] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0] and set(delays[5:]) == {30.0}

"""The env-call watchdog's verdicts, from a stamp and a clock given by the test (no thread,
no process ended: the integration tests in tests/integration/fleet/test_env_watchdog.py do that)."""

from __future__ import annotations

import threading

from rolloutfleet.fleet.env_watchdog import EnvWatchdog
from rolloutfleet.sampling.env.calls import CallStamp

ENV = "spec.env.id 'Slow-v0'"


def watchdog(timeout_s: float = 300.0) -> tuple[EnvWatchdog, CallStamp]:
    stamp = CallStamp()
    return EnvWatchdog(ENV, timeout_s, stamp=stamp, stop_wait_s=5.0), stamp


def test_a_call_is_stuck_at_the_timeout_not_before() -> None:
    dog, stamp = watchdog()
    stamp.begin("step", 3, now=100.0)
    assert dog.check(399.9) is None
    verdict = dog.check(400.0)
    assert verdict is not None and verdict.code == 3 and verdict.stuck
    assert verdict.line == f"{ENV}: sub-env 3 step has not returned after 300 s (spec.env.callTimeoutSeconds is 300)"


def test_no_call_in_progress_is_never_stuck() -> None:
    dog, stamp = watchdog(timeout_s=1.0)
    assert dog.check(10_000.0) is None
    stamp.begin("reset", 0, now=0.0)
    stamp.end()
    assert dog.check(10_000.0) is None


def test_the_whole_vector_env_and_a_sub_env_found_when_asked_are_named() -> None:
    dog, stamp = watchdog(timeout_s=10.0)
    stamp.begin("constructor", None, now=0.0)
    assert "the vector env constructor has not returned after 12 s" in dog.check(12.0).line  # type: ignore[union-attr]
    stamp.begin("step", lambda: 5, now=0.0)  # async: the env process says which sub-env
    assert "sub-env 5 step has not returned" in dog.check(12.0).line  # type: ignore[union-attr]


def test_a_stop_outlasted_by_a_call_leaves_cleanly_after_the_wait() -> None:
    dog, stamp = watchdog()
    stamp.begin("step", 1, now=100.0)
    dog.request_stop(now=110.0)
    dog.request_stop(now=112.0)  # a second signal does not push the wait back
    assert dog.check(114.9) is None
    verdict = dog.check(115.0)
    assert verdict is not None and verdict.code == 0 and not verdict.stuck
    assert "sub-env 1 step still running 5 s after the stop signal (for 15 s); leaving without it" in verdict.line


def test_a_call_begun_after_the_stop_gets_the_whole_wait() -> None:
    dog, stamp = watchdog()
    dog.request_stop(now=100.0)
    stamp.begin("reset", 0, now=120.0)  # the last fragment's calls go on after a stop
    assert dog.check(124.0) is None
    assert dog.check(125.0) is not None
    stamp.end()
    assert dog.check(1_000.0) is None  # between calls: the loop stops by itself


def test_the_thread_acts_once_on_the_first_verdict() -> None:
    dog, stamp = watchdog(timeout_s=0.0)
    seen: list[str] = []
    acted = threading.Event()
    stamp.begin("step", 0)

    def act(verdict: object) -> None:
        seen.append(verdict.line)  # type: ignore[attr-defined]
        acted.set()

    dog.start(act, period_s=0.01)
    assert acted.wait(30)
    dog.close()
    assert len(seen) == 1 and "sub-env 0 step has not returned" in seen[0]

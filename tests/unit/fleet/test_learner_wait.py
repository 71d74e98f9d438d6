"""A worker's waits for room, as lines: once at the start, once at the end, never per retry."""

from __future__ import annotations

from rolloutfleet.fleet.learner_wait import WAITING_BEAT_S, LearnerWait

STREAM = "rolloutfleet:{default/cartpole}:batches"


def test_a_wait_for_a_learner_is_said_once_and_ended_once_with_its_length() -> None:
    wait = LearnerWait()
    start = wait.absent(STREAM, waited_s=1.0, now=101.0)
    assert start is not None and start.startswith(f"waiting for a learner to read {STREAM}: the stream is full")
    assert wait.waiting and wait.since == 100.0
    # Every later report and timeout of the same wait: nothing new to say, since unchanged.
    for now in (102.0, 160.0, 400.0):
        assert wait.absent(STREAM, waited_s=60.0, now=now) is None
    assert wait.since == 100.0
    assert wait.published(now=430.5) == [
        f"stopped waiting for a learner after 330.5 s: there is room in {STREAM} again"
    ]
    assert not wait.waiting and wait.published(now=431.0) == []


def test_a_learner_that_starts_reading_ends_the_wait_before_there_is_room() -> None:
    wait = LearnerWait()
    wait.absent(STREAM, 0.0, now=10.0, ignored=("inspect",))
    assert (
        wait.reading("learner", now=25.0)
        == f"stopped waiting for a learner after 15.0 s: learner group 'learner' reads {STREAM}"
    )
    assert wait.reading("learner", now=26.0) is None  # a learner reading, no wait: nothing to say


def test_the_groups_left_out_are_named_in_the_start_line() -> None:
    line = LearnerWait().absent(STREAM, 0.0, now=1.0, ignored=("inspect", "old"))
    assert line is not None and "(groups inspect, old have not read within learner_idle_s)" in line


def test_a_slow_learner_is_warned_about_once_per_stretch_and_said_when_it_made_room() -> None:
    wait = LearnerWait()
    first = wait.slow("learner", STREAM, waited_s=60.0, now=160.0)
    assert first is not None and "learner group 'learner' has not made room" in first and "60.0 s" in first
    assert wait.slow("learner", STREAM, waited_s=60.0, now=220.0) is None
    assert not wait.waiting  # a learner that reads is not waited for
    assert wait.published(now=230.0) == ["learner group 'learner' made room after 130.0 s"]
    assert wait.slow("learner", STREAM, waited_s=60.0, now=400.0) is not None  # a new stretch


def test_a_slow_learner_that_stops_reading_becomes_a_wait_for_a_learner() -> None:
    wait = LearnerWait()
    wait.slow("learner", STREAM, waited_s=60.0, now=160.0)
    assert wait.absent(STREAM, waited_s=30.0, now=250.0) is not None
    assert wait.slow_group is None and wait.since == 220.0


def test_a_stop_ends_the_wait() -> None:
    wait = LearnerWait()
    assert wait.end(now=5.0, why="stopping") is None
    wait.absent(STREAM, 2.0, now=10.0)
    assert wait.end(now=12.0, why="stopping") == "stopped waiting for a learner after 4.0 s: stopping"


def test_the_heartbeat_says_since_when_at_once_when_it_changed_else_every_few_seconds() -> None:
    wait = LearnerWait()
    assert not wait.beat_due(100.0)  # not waiting, and the last beat said so
    wait.absent("rf:cp:batches", waited_s=5.0, now=1_000.0)
    assert wait.beat_due(100.0)  # the wait began: at once
    wait.beat = (100.0, wait.since)
    assert not wait.beat_due(100.0 + WAITING_BEAT_S - 0.5)
    assert wait.beat_due(100.0 + WAITING_BEAT_S)  # still waiting: refreshed
    wait.published(now=1_010.0)
    assert wait.beat_due(101.0)  # the wait ended: at once
    wait.beat = (101.0, None)
    assert not wait.beat_due(101.0 + 10 * WAITING_BEAT_S)  # no wait to refresh

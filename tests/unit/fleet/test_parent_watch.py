"""The worker's parent watch, in-process (the real supervisor is killed in tests/integration)."""

from __future__ import annotations

import os
import threading

import pytest

from rolloutfleet.fleet.parent_watch import PARENT_PID_ENV, parent_pid_from, watch_parent
from rolloutfleet.spec.job import SpecError


def test_the_parent_pid_comes_from_the_environment_and_bad_values_name_the_variable() -> None:
    assert parent_pid_from({}) is None and parent_pid_from({PARENT_PID_ENV: ""}) is None
    assert parent_pid_from({PARENT_PID_ENV: "4242"}) == 4242
    for bad in ("x", "-1", "0", "12.5"):
        with pytest.raises(SpecError, match=PARENT_PID_ENV):
            parent_pid_from({PARENT_PID_ENV: bad})


def test_a_process_whose_parent_is_not_the_supervisor_stops_then_exits_hard() -> None:
    stopped, exited = threading.Event(), threading.Event()
    codes: list[int] = []

    def hard_exit(code: int) -> None:
        codes.append(code)
        exited.set()

    # A supervisor pid that is not our parent: as after re-parenting.
    watch_parent(os.getppid() + 1, stopped.set, grace_s=0.2, interval_s=0.01, hard_exit=hard_exit)
    assert stopped.wait(10) and exited.wait(10) and codes == [1]

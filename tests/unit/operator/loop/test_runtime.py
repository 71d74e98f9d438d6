"""The operator's in-memory state: one companion per job, made on first use."""

from __future__ import annotations

from typing import Any

from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.runtime import JobRuntime, Runtime


def test_a_job_keeps_one_companion_until_it_is_dropped(kube: Any) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    first = runtime.job(("team", "cp"))
    assert runtime.job(("team", "cp")) is first and runtime.job(("team", "other")) is not first
    runtime.jobs.pop(("team", "cp"))  # the job was deleted
    assert runtime.job(("team", "cp")) is not first


def test_a_new_companion_remembers_nothing() -> None:
    state = JobRuntime()
    assert (state.memory.known, state.memory.deleted, state.memory.expected) == ({}, set(), {})
    assert not state.rounds.dirty and not state.rounds.lock.locked() and state.written is None
    assert JobRuntime().memory is not state.memory  # no state shared between jobs


def test_the_pod_watch_progress_is_the_newest_version_seen_per_namespace(kube: Any) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    for version in ("120", "95", "", None, "not-a-number", "130"):  # events of different pods, out of order
        runtime.note_pod_version("team", version)
    runtime.note_pod_version("other", "7")
    assert runtime.pod_versions == {"team": 130, "other": 7}

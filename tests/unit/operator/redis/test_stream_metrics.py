"""The stream gauges: per job and policy, per group; a group gone or a Redis that cannot be read
drops its series; a deleted job leaves none behind."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

import rolloutfleet_operator.redis.stream_metrics as stream_metrics
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.stream_backlog import GroupBacklog, PolicyBacklog
from rolloutfleet_operator import metrics
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.runtime import Runtime

KEY = ("unit", "sm")
calls: list[str] = []


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": "unit", "job_name": "sm", **labels})


def body(**metadata: Any) -> dict[str, Any]:
    return {"metadata": {"name": "sm", **metadata}, "spec": {"env": {"id": "CartPole-v1"}}}


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the Redis read answers, in turn (an exception is raised); ``calls`` counts the reads."""
    queue: list[Any] = []

    def read(url: str, job: RolloutJob, password: str | None) -> Any:
        calls.append(job.name)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(stream_metrics, "read_job_backlog", read)
    return queue


def test_series_per_policy_and_group_with_unknown_lags_left_out() -> None:
    backlogs = [
        PolicyBacklog(None, 7, (GroupBacklog("learner", 2, 5, 40), GroupBacklog("late", 0, None, None))),
        PolicyBacklog("red", 3, ()),
    ]
    assert stream_metrics.stream_series(backlogs) == {
        (metrics.STREAM_ENTRIES, ("",)): 7,
        (metrics.GROUP_PENDING, ("", "learner")): 2,
        (metrics.GROUP_LAG, ("", "learner")): 5,
        (metrics.GROUP_ENTRIES_READ, ("", "learner")): 40,
        (metrics.GROUP_PENDING, ("", "late")): 0,
        (metrics.STREAM_ENTRIES, ("red",)): 3,
    }


@pytest.mark.asyncio
async def test_gauges_follow_the_reads_and_go_with_the_job(answers: list[Any]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=cast(Any, None))
    index = {KEY: [body()]}
    answers += [
        [PolicyBacklog(None, 7, (GroupBacklog("learner", 2, 5, 40), GroupBacklog("old", 1, 6, 1)))],
        [PolicyBacklog(None, 9, (GroupBacklog("learner", 1, 4, 44),))],
        ConnectionError("redis away"),
        [PolicyBacklog(None, 2, (GroupBacklog("learner", 0, 0, 50),))],
    ]
    await stream_metrics.read_stream_metrics(KEY, runtime, index)
    assert value("rolloutfleet_operator_stream_entries", policy="") == 7
    assert value("rolloutfleet_operator_consumer_group_lag", policy="", group="old") == 6
    await stream_metrics.read_stream_metrics(KEY, runtime, index)
    assert value("rolloutfleet_operator_consumer_group_lag", policy="", group="learner") == 4
    assert value("rolloutfleet_operator_consumer_group_lag", policy="", group="old") is None  # destroyed
    assert value("rolloutfleet_operator_consumer_group_pending", policy="", group="old") is None
    await stream_metrics.read_stream_metrics(KEY, runtime, index)  # unreadable: no frozen numbers
    assert value("rolloutfleet_operator_stream_entries", policy="") is None
    await stream_metrics.read_stream_metrics(KEY, runtime, index)
    assert value("rolloutfleet_operator_consumer_group_entries_read", policy="", group="learner") == 50
    metrics.forget_job(*KEY)  # what the reconcile of a deleted job calls
    assert value("rolloutfleet_operator_stream_entries", policy="") is None
    assert value("rolloutfleet_operator_consumer_group_lag", policy="", group="learner") is None


@pytest.mark.asyncio
async def test_a_job_being_deleted_or_with_a_bad_spec_is_not_read(answers: list[Any]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=cast(Any, None))
    calls.clear()
    bad = {"metadata": {"name": "sm"}, "spec": {"env": {}}}
    for index in ({KEY: [body(deletionTimestamp="2026-11-26T00:00:00Z")]}, {KEY: [bad]}, {}):
        await stream_metrics.read_stream_metrics(KEY, runtime, index)
    assert calls == []

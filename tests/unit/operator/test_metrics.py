"""The operator's series the chart's alerts read: restart budget per job, failures by job,
reconcile errors; read back from the registry its /metrics serves."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.handlers import request_reconcile
from rolloutfleet_operator.loop.runtime import Runtime
from tests.unit.operator.loop.test_reconcile import KEY, indexed_job, observed, run

LABELS = {"namespace": "team", "job_name": "cp"}


def value(name: str, labels: dict[str, str] | None = None) -> float | None:
    return REGISTRY.get_sample_value(name, labels or {})


@pytest.mark.asyncio
async def test_the_budget_and_the_failures_are_per_job_and_go_with_the_job(kube: Any, posted: list[Any]) -> None:
    policy = {"maxRestarts": 5, "backoffSeconds": 0, "backoffLimitSeconds": 0}
    runtime, job = Runtime(config=OperatorConfig(), api=kube.api()), indexed_job(restartPolicy=policy)
    failures_before = value("rolloutfleet_operator_worker_failures_total", LABELS) or 0.0
    await run(runtime, job, [])
    assert value("rolloutfleet_operator_job_restarts", LABELS) == 0
    assert value("rolloutfleet_operator_job_max_restarts", LABELS) == 5
    await run(runtime, job, [observed(kube, "cp-worker-0"), observed(kube, "cp-worker-1", "Failed", exit_code=3)])
    assert value("rolloutfleet_operator_job_restarts", LABELS) == 1
    assert value("rolloutfleet_operator_worker_failures_total", LABELS) == failures_before + 1
    job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    await run(runtime, job, [])
    assert value("rolloutfleet_operator_job_restarts", LABELS) is None
    assert value("rolloutfleet_operator_job_max_restarts", LABELS) is None


@pytest.mark.asyncio
async def test_a_reconcile_that_raises_is_counted_and_still_raises(kube: Any, posted: list[Any]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    job = indexed_job()
    del job["metadata"]["uid"]  # a body reconcile cannot use
    before = value("rolloutfleet_operator_reconcile_errors_total") or 0.0
    with pytest.raises(KeyError):
        await request_reconcile(KEY, runtime, {KEY: [job]}, {KEY: []}, {}, {})
    assert value("rolloutfleet_operator_reconcile_errors_total") == before + 1
    await request_reconcile(KEY, runtime, {KEY: [indexed_job()]}, {KEY: []}, {}, {})
    assert value("rolloutfleet_operator_reconcile_errors_total") == before + 1

"""bench.bench_operator: a size that fails is a row of the table, and its operator process
is stopped (the real thing: a child process the bench spawned)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from bench import apiserver_metrics, children
from bench.bench_operator import render, run_size


class RefusingBench:
    """Starts a real child as its "operator"; the API server refuses the job."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.py_spy, self.api = tmp, None, None
        self.core = SimpleNamespace(create_namespace=lambda body: None)
        self.custom = SimpleNamespace(create_namespaced_custom_object=self.refuse)
        self.started: list[Any] = []

    def refuse(self, *args: Any) -> None:
        raise ApiException(status=403, reason="Forbidden")

    def start_operator(self, namespace: str, label: str) -> tuple[Any, int]:
        process = children.spawn(["sleep", "1000"], self.tmp / "operator.log")
        self.started.append(process)
        return process, process.pid

    def control_plane_cpu(self) -> float:
        return 0.0


@contextlib.contextmanager
def no_kubelet(api: Any, namespace: str) -> Any:
    yield SimpleNamespace()


def test_a_failing_size_is_a_row_and_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(apiserver_metrics, "scrape", lambda api: apiserver_metrics.Scrape())
    bench: Any = RefusingBench(tmp_path)
    rows = run_size(bench, 1000, "redis://x", timeout=5, behave=False, kubelet=no_kubelet)
    assert [r.outcome.split(":")[0] for r in rows] == ["FAILED"]
    assert "403" in rows[0].outcome
    (operator,) = bench.started
    assert operator.poll() is not None  # stopped (and reaped): nothing left running
    assert children.alive() == []
    assert "FAILED" in "\n".join(render(rows, 2))  # the table shows it, with no numbers made up

"""bench_transport's end-to-end measurement against a real redis-server: the pipeline moves
data, and the CPU it reports for each side is real and no more than the cores allow."""

from __future__ import annotations

import os

import pytest

from bench.bench_transport import CPU_SIDES, end_to_end

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("path", ["ours", "raw-lossless"])
def test_end_to_end_reports_the_cpu_of_each_side(redis_url: str, path: str) -> None:
    run = end_to_end(redis_url, path, 0.6)
    assert run.mb > 0 and run.rows > 0
    assert set(run.cpu_us) == set(CPU_SIDES)
    assert all(us > 0 for us in run.cpu_us.values()), run.cpu_us  # each process did work
    # CPU seconds per second over the window, all sides together, cannot exceed the cores.
    entries_per_s = run.rows / 2048
    assert sum(run.cpu_us.values()) * entries_per_s / 1e6 <= len(os.sched_getaffinity(0)) * 1.05

"""bench_transport's CPU accounting: a process's CPU read from /proc agrees with what the
kernel tells the process itself, and the per-entry table is the medians of the runs."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

from bench.bench_transport import CPU_SIDES, Run, cpu_seconds, cpu_table, per_entry


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_seconds_of_this_process_agrees_with_os_times() -> None:
    def own() -> float:
        times = os.times()
        return times.user + times.system

    before, kernel_before = cpu_seconds(os.getpid()), own()
    burn(0.3)
    spent, kernel_spent = cpu_seconds(os.getpid()) - before, own() - kernel_before
    assert kernel_spent > 0.25  # os.times counts in ticks too
    assert abs(spent - kernel_spent) < 0.05  # /proc counts in clock ticks (10 ms)


def test_cpu_seconds_tells_a_busy_child_from_a_sleeping_one() -> None:
    context = mp.get_context("fork")
    busy, idle = context.Process(target=burn, args=(0.4,)), context.Process(target=time.sleep, args=(0.4,))
    busy.start(), idle.start()
    assert busy.pid is not None and idle.pid is not None
    start = {p.pid: cpu_seconds(p.pid) for p in (busy, idle)}
    time.sleep(0.25)
    used = {p.pid: cpu_seconds(p.pid) - start[p.pid] for p in (busy, idle)}
    busy.join(10), idle.join(10)
    assert used[idle.pid] <= 0.02
    assert 0.02 < used[busy.pid] <= 0.25 + 0.02  # at most the wall time, on one core


def test_per_entry_divides_cpu_by_the_entries_consumed() -> None:
    # 100 entries of 2048 rows a second for 2 s: 200 entries.
    us = per_entry({"Redis": 0.02, "producers": 0.04, "consumer": 0.0}, 2048 * 100, 2.0)
    assert us == {"Redis": 100.0, "producers": 200.0, "consumer": 0.0}
    assert all(v != v for v in per_entry({"Redis": 0.01}, 0.0, 2.0).values())  # nothing consumed: NaN


def test_cpu_table_holds_each_sides_median_and_the_median_total() -> None:
    runs = {
        "ours": [
            Run(1.0, 1.0, dict(zip(CPU_SIDES, sides, strict=True)))
            for sides in ((80, 100, 60), (90, 110, 50), (70, 120, 70))
        ],
        "raw": [Run(1.0, 1.0, {"Redis": 75.0, "producers": 60.0, "consumer": 35.0})],
    }
    table = cpu_table(runs)
    assert table.series == list(CPU_SIDES) and table.unit == "us per entry"
    assert table.rows == [
        {"path": "BatchPublisher -> BatchConsumer", "Redis": 80, "producers": 110, "consumer": 60, "total": 250},
        {"path": "raw redis-py (XADD trims)", "Redis": 75.0, "producers": 60.0, "consumer": 35.0, "total": 170.0},
    ]

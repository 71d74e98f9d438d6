"""The soak's arithmetic on made-up samples: durations, growth after the warm-up, slope, verdict."""

from __future__ import annotations

import argparse

import pytest

from bench.soak_analysis import Sample, analyze, parse_duration, summary_line, verdict


@pytest.mark.parametrize(
    ("text", "seconds"), [("120", 120.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0), ("1h30m", 5400.0)]
)
def test_durations_read_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "1x", "h", "1h 30m", "-5"])
def test_a_malformed_duration_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        parse_duration(text)


def series(process: str, mb: list[float], pid: int = 1, every: float = 10.0) -> list[Sample]:
    return [Sample(i * every, process, pid, round(v * 1024), round(v * 512), 1) for i, v in enumerate(mb)]


def test_growth_is_judged_after_the_warm_up_between_medians_of_the_first_and_last_windows():
    # 100 samples, 10 s apart: start-up from 100 MB, then 500 MB growing linearly to 520 MB.
    mb = [100.0] * 10 + [500.0 + 20.0 * i / 89 for i in range(90)]
    growth = analyze(series("worker-0", mb), warmup_s=100.0)["worker-0"]
    assert growth.samples == 90
    # Windows of 5 % of the 1 000 s run (50 s): 6 samples each, medians of a straight line.
    assert growth.start_mb == pytest.approx(500.0 + 20.0 * 2.5 / 89, abs=0.01)
    assert growth.end_mb == pytest.approx(500.0 + 20.0 * 86.5 / 89, abs=0.01)
    assert growth.growth_pct == pytest.approx((growth.end_mb / growth.start_mb - 1) * 100)
    # 20 MB over 890 s is 80.9 MB/h: the least-squares slope of an exact line.
    assert growth.slope_mb_per_h == pytest.approx(20.0 / 890 * 3600, rel=1e-3)
    assert growth.peak_mb == pytest.approx(520.0, abs=0.01)
    assert growth.anon_start_mb == pytest.approx(growth.start_mb / 2, abs=0.01)


def test_flat_memory_passes_and_the_summary_names_each_kind():
    samples = (
        series("worker-0", [500.0] * 50)
        + series("worker-1", [502.0] * 50)
        + series("learner", [700.0] * 50)
        + series("redis-server", [10.0] * 50)
        + series("supervisor", [45.0] * 50)
    )
    growths = analyze(samples, warmup_s=50.0)
    assert verdict(growths, 5.0, batches=10) == []
    assert summary_line(500.0, growths) == (
        "soak: 8m20s, worker RSS 501.0 -> 501.0 MB (+0.0 %, worst +0.0 %), learner RSS 700.0 -> 700.0 MB (+0.0 %), "
        "redis RSS 10.0 -> 10.0 MB (+0.0 %), supervisor RSS 45.0 -> 45.0 MB (+0.0 %)"
    )


def test_a_worker_growing_past_the_limit_a_restarted_worker_and_no_batches_fail():
    growing = series("worker-0", [500.0] * 10 + [500.0 + i for i in range(90)])  # medians 502.5 -> 586.5 MB
    restarted = series("worker-1", [500.0] * 50, pid=1) + series("worker-1", [500.0] * 50, pid=2, every=10.0)
    restarted = [Sample(i * 10.0, s.process, s.pid, s.rss_kb, s.rss_anon_kb, 1) for i, s in enumerate(restarted)]
    problems = verdict(analyze(growing + restarted, warmup_s=100.0), 5.0, batches=0)
    assert problems == [
        "worker-0 RSS grew +16.7 % after the warm-up (limit 5 %)",
        "worker-1 was restarted (2 pids): its growth cannot be judged",
        "the learner consumed no batch",
    ]


def test_no_worker_sampled_fails():
    assert verdict(analyze(series("learner", [1.0] * 10), warmup_s=0.0), 5.0, batches=1) == [
        "no worker was sampled after the warm-up"
    ]

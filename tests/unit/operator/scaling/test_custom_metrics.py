"""status.customMetrics from the workers' heartbeats."""

from __future__ import annotations

import math

from rolloutfleet.transport.heartbeat import beat, parse_heartbeats
from rolloutfleet_operator.scaling.custom_metrics import custom_metrics_status


def test_the_job_mean_is_the_mean_of_the_current_workers_means() -> None:
    stats = [
        {
            "custom/lap_time_mean": 10.0,
            "custom/lap_time_min": 1.0,
            "custom/lap_time_max": 30.0,
            "custom/fuel_mean": 2.0,
        },
        {"custom/lap_time_mean": 14.0},
        {"custom/lap_time_mean": 1000.0},  # worker 2: beyond the 2 desired (scaled down), left out
    ]
    # Through the heartbeat's own JSON, as the operator reads it from Redis.
    beats = parse_heartbeats({str(i): beat(s, now=1.0) for i, s in enumerate(stats)})
    assert custom_metrics_status(beats, desired=2) == {"customMetrics": {"fuel": 2.0, "lap_time": 12.0}}


def test_no_custom_metric_is_null_and_non_finite_values_are_left_out() -> None:
    beats = parse_heartbeats({"0": beat({"episode_return_mean": 3.0}, now=1.0)})
    assert custom_metrics_status(beats, 1) == {"customMetrics": None}
    assert custom_metrics_status({0: {"custom/x_mean": math.nan}, 1: {"custom/x_mean": 4.0}}, 2) == {
        "customMetrics": {"x": 4.0}
    }

"""spec.autoscaling: bounds, defaults, and one line naming the field for each mistake."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError


def spec_of(**spec: Any) -> Any:
    return RolloutJob.from_dict({"metadata": {"name": "j"}, "spec": {"env": {"id": "CartPole-v1"}, **spec}}).spec


def test_absent_by_default_and_defaults_when_given() -> None:
    assert spec_of().autoscaling is None
    scaling = spec_of(autoscaling={"maxReplicas": 8}).autoscaling
    assert (scaling.min_replicas, scaling.max_replicas, scaling.idle_seconds, scaling.window_seconds) == (0, 8, 300, 60)
    assert 0 < scaling.starved_ratio < scaling.blocked_ratio < 1


def test_zero_workers_is_a_valid_minimum_and_equal_bounds_fix_the_size() -> None:
    assert spec_of(autoscaling={"minReplicas": 0, "maxReplicas": 1}).autoscaling.clamp(5) == 1
    assert spec_of(autoscaling={"minReplicas": 3, "maxReplicas": 3}).autoscaling.clamp(0) == 3


@pytest.mark.parametrize(
    ("autoscaling", "field", "words"),
    [
        ({"minReplicas": 5, "maxReplicas": 3}, "spec.autoscaling.minReplicas", "must be <= maxReplicas (3), got 5"),
        ({"minReplicas": -1, "maxReplicas": 3}, "spec.autoscaling.minReplicas", "greater than or equal to 0"),
        ({"maxReplicas": 0}, "spec.autoscaling.maxReplicas", "greater than or equal to 1"),
        ({"maxReplicas": -2}, "spec.autoscaling.maxReplicas", "greater than or equal to 1"),
        ({}, "spec.autoscaling.maxReplicas", "Field required"),
        ({"maxReplicas": 2, "idleSeconds": -5}, "spec.autoscaling.idleSeconds", "greater than or equal to 1"),
        ({"maxReplicas": 2, "starvedRatio": 0}, "spec.autoscaling.starvedRatio", "greater than 0"),
        ({"maxReplicas": 2, "blockedRatio": 1.5}, "spec.autoscaling.blockedRatio", "less than or equal to 0.9"),
        ({"maxReplicas": 2, "mxReplicas": 3}, "spec.autoscaling.mxReplicas", "unknown field"),
    ],
)
def test_each_mistake_names_its_field(autoscaling: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec_of(autoscaling=autoscaling)
    message = str(caught.value)
    assert message.startswith(f"{field}: ") and words in message, message
    assert "\n" not in message


def test_drop_oldest_backpressure_contradicts_autoscaling_and_is_named() -> None:
    with pytest.raises(SpecError) as caught:
        spec_of(autoscaling={"maxReplicas": 4}, redis={"backpressure": "dropOldest"})
    assert str(caught.value).startswith("spec.redis.backpressure: must be 'block' with spec.autoscaling")
    assert spec_of(redis={"backpressure": "dropOldest"}).redis.backpressure == "dropOldest"  # fine without it

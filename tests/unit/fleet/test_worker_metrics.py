"""The external env's series of a worker's registry: lifetime counts become counters that
grow by what is new, the clients and episodes open now gauges; a worker of a plain env
serves none of them."""

from __future__ import annotations

from rolloutfleet.fleet.worker_metrics import EXTERNAL_SERIES, WorkerMetrics

LABELS = {"job_name": "ext", "namespace": "default", "worker_index": "0"}


def sample(metrics: WorkerMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, LABELS)


def test_lifetime_counts_become_counters_and_open_things_gauges() -> None:
    metrics = WorkerMetrics("ext", "default", 0)
    metrics.record_external({"external/actions": 10, "external/clients": 3, "external/calls_refused": 0})
    metrics.record_external({"external/actions": 25, "external/clients": 1, "external/calls_refused": 2})
    metrics.record_external({"external/actions": 25, "external/clients": 0, "external/calls_refused": 2})
    assert sample(metrics, "rolloutfleet_external_actions_total") == 25
    assert sample(metrics, "rolloutfleet_external_calls_refused_total") == 2
    assert sample(metrics, "rolloutfleet_external_clients") == 0
    assert sample(metrics, "rolloutfleet_external_episodes_dropped_total") is None  # never reported


def test_a_zero_count_is_served_from_the_first_report() -> None:
    metrics = WorkerMetrics("ext", "default", 0)
    metrics.record_external({f"external/{name}": 0 for name in EXTERNAL_SERIES})
    for name in EXTERNAL_SERIES:
        assert (
            sample(metrics, f"rolloutfleet_external_{name}") == 0
            or sample(metrics, f"rolloutfleet_external_{name}_total") == 0
        ), name


def test_a_plain_worker_serves_no_external_series() -> None:
    metrics = WorkerMetrics("cp", "default", 0)
    metrics.record_external({"num_env_steps_sampled": 100, "env_steps_per_s": 5.0})
    served = {s.name for family in metrics.registry.collect() for s in family.samples}
    assert not any(name.startswith("rolloutfleet_external_") for name in served)

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


def test_step_timing_is_served_per_phase_in_seconds_per_vector_step() -> None:
    metrics = WorkerMetrics("cp", "default", 0)
    metrics.record_step_timing({"num_env_steps_sampled": 100})  # a runner that does not time its steps
    assert (
        metrics.registry.get_sample_value(
            "rolloutfleet_vector_step_seconds", {**LABELS, "job_name": "cp", "phase": "inference"}
        )
        is None
    )
    stats = {
        "timers/inference_ms": 2.0,
        "timers/env_wait_ms": 5.0,
        "timers/recording_ms": 1.0,
        "timers/vector_steps": 200,
    }
    metrics.record_step_timing(stats)
    metrics.record_step_timing(stats, publish_seconds=0.1)
    served = {
        phase: metrics.registry.get_sample_value(
            "rolloutfleet_vector_step_seconds", {**LABELS, "job_name": "cp", "phase": phase}
        )
        for phase in ("inference", "env_wait", "recording", "publish")
    }
    assert served == {"inference": 0.002, "env_wait": 0.005, "recording": 0.001, "publish": 0.0005}


def test_the_transports_totals_are_carried_by_what_is_new() -> None:
    from types import SimpleNamespace

    metrics = WorkerMetrics("cp", "default", 0)
    labels = {**LABELS, "job_name": "cp"}

    def transport(blocked: float, resent: int, refusals: int) -> SimpleNamespace:
        stats = SimpleNamespace(blocked_seconds=blocked, oom_wait_seconds=0.0, resent=resent)
        subscriber = SimpleNamespace(resets=0, refusals=refusals)
        return SimpleNamespace(publishers={"p": SimpleNamespace(stats=stats)}, subscribers={"w": subscriber})

    metrics.count_transport(transport(1.5, 2, 0))
    metrics.count_transport(transport(4.0, 2, 1))
    assert metrics.registry.get_sample_value("rolloutfleet_backpressure_wait_seconds_total", labels) == 4.0
    assert metrics.registry.get_sample_value("rolloutfleet_batches_resent_total", labels) == 2
    assert metrics.registry.get_sample_value("rolloutfleet_weights_refused_total", labels) == 1


def test_a_fragments_metrics_count_new_env_restarts_and_nonfinite_rows() -> None:
    from rolloutfleet.fleet.nonfinite import NonFinite

    metrics = WorkerMetrics("cp", "default", 0)
    labels = {**LABELS, "job_name": "cp"}
    stats = {"num_env_steps_sampled": 800, "num_episodes": 3, "env_steps_per_s": 4000.0}
    stats |= {"episode_return_mean": float("nan"), "num_env_restarts": 5}
    metrics.record_fragment(stats, restarts_seen=2, news=NonFinite(obs_rows=4, reward_rows=1, quarantined=0))
    sample = metrics.registry.get_sample_value
    assert sample("rolloutfleet_env_restarts_total", labels) == 3
    assert sample("rolloutfleet_env_steps_total", labels) == 800
    assert sample("rolloutfleet_nonfinite_observation_rows_total", labels) == 4
    assert sample("rolloutfleet_nonfinite_reward_rows_total", labels) == 1
    assert sample("rolloutfleet_episode_return_mean", labels) == 0  # a NaN mean is not served

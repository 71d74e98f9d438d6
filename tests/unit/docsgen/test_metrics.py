"""The metrics page lists every series of the registries, with the names a scrape shows."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from docsgen import metrics
from rolloutfleet.fleet.worker_metrics import WorkerMetrics


def test_the_series_are_those_the_exposition_format_shows() -> None:
    registry = CollectorRegistry()
    Counter("t_things_total", "Things", ["a"], registry=registry).labels(a="1").inc()
    Gauge("t_level", "Level", registry=registry).set(2)
    Histogram("t_seconds", "Time", ["b"], registry=registry).labels(b="x").observe(0.1)
    Gauge("t_unset", "Never set", ["c", "d"], registry=registry)
    docs = {d.name: d for d in metrics.documented(registry, "t_")}
    assert docs["t_unset"].labels == ("c", "d") and docs["t_seconds"].type == "histogram"
    scraped = {
        s.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples
    } - {"t_things_created", "t_seconds_created"}
    assert scraped == {s for d in docs.values() if d.name != "t_unset" for s in d.series}


def test_the_worker_and_operator_tables_hold_every_metric_with_labels_and_help() -> None:
    worker, operator = metrics.worker_metrics(), metrics.operator_metrics()
    page = metrics.render(worker, operator)
    registry = WorkerMetrics("j", "ns", 0).registry
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name.endswith("_created"):  # the client's own creation-time gauges
            continue
        assert all(f"`{s.name}`" in page for s in family.samples if not s.name.endswith("_created")), family.name
        assert family.documentation in page
    device = next(d for d in worker if d.name == "rolloutfleet_policy_device")
    assert device.labels == ("job_name", "namespace", "worker_index", "policy", "requested", "device", "inference")
    errors = next(d for d in operator if d.name == "rolloutfleet_operator_reconcile_errors")
    assert errors.series == ("rolloutfleet_operator_reconcile_errors_total",)
    assert "`rolloutfleet_operator_reconcile_seconds_bucket`" in page

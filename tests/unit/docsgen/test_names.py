"""Metric and label names read out of PromQL."""

from __future__ import annotations

from docsgen import names


def test_metrics_and_labels_of_a_query() -> None:
    query = (
        'sum by (namespace, job_name) (rate(rolloutfleet_a_total{pod=~"x-.*",worker_index!="1"}[5m]))'
        " > on (namespace) group_left rolloutfleet_b"
    )
    assert names.metrics_in(query) == {"rolloutfleet_a_total", "rolloutfleet_b"}
    assert set(names.labels_in(query)) == {
        ("rolloutfleet_a_total", "pod"),
        ("rolloutfleet_a_total", "worker_index"),
        (None, "namespace"),
        (None, "job_name"),
    }
    assert set(names.labels_in('label_values(rolloutfleet_c{ns="a"}, job_name)')) == {
        ("rolloutfleet_c", "ns"),
        (None, "job_name"),
    }


def test_the_chart_files_have_queries() -> None:
    assert len(names.alert_queries()) == 8
    assert len(names.dashboard_queries()) > 20

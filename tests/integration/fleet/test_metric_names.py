"""Names that exist: every metric and label the chart's dashboard, its alerts and the docs'
metrics reference name is one a live worker serves on /metrics (a real worker process
publishing to a real redis-server, and one serving an external env to a PolicyClient), or
one the operator's registry declares (in-process: the operator's own /metrics serves that
registry)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from docsgen import metrics, names
from rolloutfleet.client import PolicyClient
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.external.test_external_metrics import play, start_serving_worker
from tests.integration.external.test_external_worker import external_job, stop
from tests.integration.fleet.test_worker import start_worker, wait_probe
from tests.integration.fleet_helpers import read_until, small_job, wait_until

# Labels Prometheus adds to every scraped series (target labels of a PodMonitor/ServiceMonitor),
# and the bucket bound of histograms.
TARGET_LABELS = {"pod", "instance", "job", "namespace", "container", "endpoint", "service", "le"}


def scrape(port: int) -> dict[str, set[str]]:
    """Sample name -> its label names, from a worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    served: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    return served


def operator_series() -> dict[str, set[str]]:
    return {s: set(d.labels) for d in metrics.operator_metrics() for s in d.series}


def live_worker_series(redis_url: str, tmp_path: Path) -> dict[str, set[str]]:
    """What a worker serves once it has published (its policy's and env's series included)."""
    port = free_port()
    job = small_job("w", replicas=1).to_dict()
    job["spec"]["sampling"]["callbacks"] = "tests.integration.fleet.custom_callbacks:ReturnCheck"  # custom metrics
    worker = start_worker(redis_url, port, tmp_path, job=RolloutJob.from_dict(job))
    try:
        # CartPole episodes end within a few fragments: the custom metric's series exist by then
        read_until(BatchConsumer(redis_url, "w", group="names"), lambda ms: len(ms) >= 6, timeout=90)
        wait_probe(port, "/readyz", 200, 30)
        return scrape(port)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def live_external_series(redis_url: str, tmp_path: Path) -> dict[str, set[str]]:
    """What a worker serving an external env serves once a simulator has played an episode."""
    tmp_path.mkdir()
    worker, address, port = start_serving_worker(external_job(fragment=4, port=9900), redis_url, tmp_path)
    try:
        play(PolicyClient(address), 8)
        wait_until(lambda: "rolloutfleet_external_actions_total" in scrape(port), 60, "the external series")
        return scrape(port)
    finally:
        stop(worker)


def test_the_dashboard_the_alerts_and_the_reference_name_only_exported_metrics(redis_url: str, tmp_path: Path) -> None:
    worker = live_worker_series(redis_url, tmp_path)
    assert not any(name.startswith("rolloutfleet_external_") for name in worker)  # only where an env is external
    for name, labels in live_external_series(redis_url, tmp_path / "external").items():
        worker.setdefault(name, set()).update(labels)
    operator = operator_series()
    assert "rolloutfleet_env_steps_total" in worker and "rolloutfleet_policy_device" in worker
    exported = {**worker, **operator}

    queries = {"dashboard": names.dashboard_queries(), "alerts": names.alert_queries()}
    missing = [
        f"{where}: {metric}"
        for where, exprs in queries.items()
        for expr in exprs
        for metric in names.metrics_in(expr)
        if metric not in exported
    ]
    documented = {s for d in [*metrics.worker_metrics(), *metrics.operator_metrics()] for s in d.series}
    missing += [f"reference: {series}" for series in sorted(documented - set(exported))]
    assert not missing, missing

    bad_labels = []
    for where, exprs in queries.items():
        for expr in exprs:
            used = names.metrics_in(expr)
            known = set().union(*(exported[m] for m in used)) | TARGET_LABELS
            for metric, label in names.labels_in(expr):
                allowed = (exported[metric] | TARGET_LABELS) if metric else known
                if label not in allowed:
                    bad_labels.append(f"{where}: {label} ({metric or ', '.join(sorted(used))}) in {expr!r}")
    assert not bad_labels, bad_labels
    assert (documented_worker := {s for d in metrics.worker_metrics() for s in d.series}) <= set(worker)
    # ...and the converse: every series a worker serves is in the reference (_created: the client's own).
    served = {s for s in worker if s.startswith("rolloutfleet_") and not s.endswith("_created")}
    assert served <= documented_worker, served - documented_worker

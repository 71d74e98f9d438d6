"""The metrics reference from the Prometheus registries the processes serve: every series'
name as scraped, its type, labels and help."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

# The series a metric of each type is scraped as (prometheus_client's text format).
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


@dataclass(frozen=True)
class MetricDoc:
    name: str  # as declared (a counter's without ``_total``)
    type: str
    labels: tuple[str, ...]
    help: str

    @property
    def series(self) -> tuple[str, ...]:
        """The names a scrape shows for it (``_created`` series left out)."""
        return tuple(self.name + s for s in _SUFFIXES.get(self.type, ("",)))


def documented(registry: CollectorRegistry, prefix: str) -> list[MetricDoc]:
    """Every metric of ``registry`` whose name starts with ``prefix``, labelled or not
    (a labelled metric no one has set yet is listed too: its labels are declared)."""
    docs = []
    for collector in list(registry._collector_to_names):
        if isinstance(collector, MetricWrapperBase) and collector._name.startswith(prefix):
            labels = tuple(collector._labelnames)
            docs.append(MetricDoc(collector._name, str(collector._type), labels, collector._documentation))
    return sorted(docs, key=lambda d: d.name)


def worker_metrics() -> list[MetricDoc]:
    """The worker's series, from a :class:`WorkerMetrics` registry as a worker builds it."""
    from rolloutfleet.fleet.worker_metrics import WorkerMetrics

    return documented(WorkerMetrics("job", "namespace", 0).registry, "rolloutfleet_")


def operator_metrics() -> list[MetricDoc]:
    """The operator's series, from the process-wide registry its module registers in."""
    import rolloutfleet_operator.metrics  # noqa: F401  (registers them)

    return documented(REGISTRY, "rolloutfleet_operator_")


def _table(docs: list[MetricDoc]) -> list[str]:
    rows = ["| series | type | labels | help |", "| --- | --- | --- | --- |"]
    for doc in docs:
        names = "<br>".join(f"`{s}`" for s in doc.series)
        labels = ", ".join(f"`{label}`" for label in doc.labels)
        help_text = doc.help.replace("|", "\\|")
        rows.append(f"| {names} | {doc.type} | {labels} | {help_text} |")
    return rows


def render(worker: list[MetricDoc], operator: list[MetricDoc]) -> str:
    lines = [
        "# Metrics",
        "",
        "Generated at build time from the Prometheus registries the processes serve. The chart's",
        "dashboard and alerts use only these names (a test scrapes a live worker to check).",
        "",
        "## Worker (`/metrics` on `ROLLOUTFLEET_METRICS_PORT`, 9100)",
        "",
        *_table(worker),
        "",
        "## Operator (`/metrics` on `--metrics-port`, 9090)",
        "",
        *_table(operator),
    ]
    return "\n".join(lines) + "\n"

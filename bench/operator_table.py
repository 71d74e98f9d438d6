"""The operator bench's table (:mod:`bench.bench_operator`): one :class:`Row` per size or
phase, what it took and what it cost, and :func:`render` to Markdown. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench import apiserver_metrics


@dataclass
class Row:
    """One line of the table: a size or a phase, what it took, and what it cost."""

    what: str
    outcome: str = "ok"
    seconds: dict[str, float] = field(default_factory=dict)
    operator_cpu_s: float = float("nan")
    operator_rss_mb: float = float("nan")
    bench_cpu_s: float = float("nan")
    control_plane_cpu_s: float = float("nan")
    server: apiserver_metrics.Scrape = field(default_factory=apiserver_metrics.Scrape)
    pods: int = 0
    ceiling: float = float("nan")  # pods/s of the bare client (bench.create_ceiling) on the same server

    @property
    def requests(self) -> apiserver_metrics.Requests:
        return self.server.requests

    def created_per_s(self) -> float:
        seconds = self.seconds.get("created", float("nan"))
        return self.pods / seconds if seconds > 0 else float("nan")


def render(rows: list[Row], cores: int) -> list[str]:
    lines = [
        "| what | outcome | seconds | pods created/s | operator CPU s (ms/pod) | operator peak RSS "
        "| API requests (req/s) | refused by the API server | server ms per POST pods | bench CPU s "
        "| apiserver+etcd CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        wall = r.seconds.get("wall", float("nan"))
        marks = ", ".join(f"{k} {v:.1f}" for k, v in r.seconds.items() if k != "wall") or f"{wall:.1f}"
        total = sum(r.requests.values())
        per_pod = 1000 * r.operator_cpu_s / r.pods if r.pods else float("nan")
        share = 100 * r.bench_cpu_s / (wall * cores) if wall == wall and wall > 0 else float("nan")
        rate = r.created_per_s()
        rate_text = "" if rate != rate else f"{rate:.0f}"
        if rate == rate and r.ceiling == r.ceiling:
            rate_text += f" ({100 * rate / r.ceiling:.0f} % of the bare client's {r.ceiling:.0f})"
        lines.append(
            f"| {r.what} | {r.outcome} | {marks} | {rate_text} | {r.operator_cpu_s:.1f} ({per_pod:.1f}) "
            f"| {r.operator_rss_mb:.0f} MB "
            f"| {apiserver_metrics.summary(r.requests, 3)} ({total / wall if wall > 0 else 0:.0f}/s) "
            f"| {apiserver_metrics.refusal_summary(r.server.refusals)} | {r.server.mean_ms('POST', 'pods'):.0f} "
            f"| {r.bench_cpu_s:.1f} ({share:.0f} % of {cores} cores) | {r.control_plane_cpu_s:.1f} |"
        )
    return lines

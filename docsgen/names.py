"""The metric and label names the chart's dashboard and alerts use, read out of their
PromQL, so a test can hold them to the names the processes export."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import yaml

CHART_FILES = Path(__file__).resolve().parent.parent / "charts" / "rolloutfleet" / "files"
METRIC = re.compile(r"\b(rolloutfleet_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(rolloutfleet_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


def dashboard_queries(path: Path = CHART_FILES / "dashboard.json") -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables."""
    board = json.loads(path.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            queries.append(query["query"])
    return queries


def alert_queries(path: Path = CHART_FILES / "alerts.yaml") -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def metrics_in(query: str) -> set[str]:
    return set(METRIC.findall(query))


def labels_in(query: str) -> Iterator[tuple[str | None, str]]:
    """(metric or None, label) for each label a query names: in a metric's selector (that
    metric), in by/on/without clauses, or as label_values' second argument (any metric)."""
    for metric, matchers in SELECTOR.findall(query):
        for label in MATCHER.findall(matchers):
            yield metric, label
    for names in GROUPING.findall(query):
        for label in filter(None, (n.strip() for n in names.split(","))):
            yield None, label
    for label in re.findall(r"label_values\([^,]+,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)", query):
        yield None, label

"""The chart's alerts and dashboard as files: every alert has a runbook heading in the docs
and a promtool test; the dashboard is Grafana JSON whose panels all query something.
(That the names exist: tests/integration/fleet/test_metric_names.py; that they render:
tests/e2e/test_chart.py; that promtool accepts them: `make lint`.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "charts" / "rolloutfleet" / "files"
RULES = yaml.safe_load((FILES / "alerts.yaml").read_text())
ALERTS = [rule for group in RULES["groups"] for rule in group["rules"]]
RUNBOOKS = "https://rolloutfleet.github.io/rolloutfleet/operations/monitoring/#"


def test_every_alert_links_to_its_own_runbook_heading() -> None:
    page = (ROOT / "docs" / "operations" / "monitoring.md").read_text()
    headings = {h.lower() for h in re.findall(r"^### (\w+)$", page, flags=re.M)}
    for alert in ALERTS:
        url = alert["annotations"]["runbook_url"]
        assert url == RUNBOOKS + alert["alert"].lower(), url
        assert alert["alert"].lower() in headings, alert["alert"]
        assert {"summary", "description"} <= set(alert["annotations"]) and alert["labels"]["severity"]
    site_url = re.findall(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)[0]
    values = yaml.safe_load((ROOT / "charts" / "rolloutfleet" / "values.yaml").read_text())
    assert RUNBOOKS.startswith(site_url) and values["monitoring"]["prometheusRule"]["runbookBaseUrl"] == site_url


def test_every_alert_is_unit_tested_firing() -> None:
    tests = yaml.safe_load((ROOT / "tests" / "promtool" / "alerts_test.yaml").read_text())
    firing = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"] if not t["exp_alerts"]}
    names = {alert["alert"] for alert in ALERTS}
    assert firing == names and quiet == names


def test_the_dashboard_is_grafana_json_with_a_query_in_every_panel() -> None:
    board = json.loads((FILES / "dashboard.json").read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert board["uid"] == "rolloutfleet" and len(panels) >= 12
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] and all(t["expr"].strip() for t in p["targets"]) for p in panels)
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "namespace", "job"}

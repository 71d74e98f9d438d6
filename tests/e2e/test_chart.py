"""The Helm chart: lint, render with several values files, validate every manifest on the
real API server, install/upgrade/uninstall, and run the operator exactly as the chart's
Deployment would (command, args, env, ServiceAccount token)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet_operator.rbac import CLUSTER, NAMESPACED, RULES
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import REPO, Cluster, describe_namespace, missing, wait_for, worker_port_block

CHART = REPO / "charts" / "rolloutfleet"
VALUES = sorted((CHART / "ci").glob("*.yaml"))
NOT_ON_THIS_CLUSTER = {"monitoring.coreos.com/v1"}  # prometheus-operator's CRDs are not installed here


@pytest.fixture(scope="module")
def helm(cluster: Cluster) -> Any:
    binary = str(Path(cluster.kubectl_bin).parent / "helm")

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [binary, "--kubeconfig", cluster.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {result.stderr}")
        return result

    return run


def render(helm: Any, *args: str) -> list[dict[str, Any]]:
    out = helm("template", "rf", str(CHART), "--namespace", "rf-system", *args).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def rules_of(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [rule for d in docs if d["kind"] == kind for rule in d["rules"]]


def normalized(rules: list[dict[str, Any]]) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    return sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in rules)


@pytest.mark.parametrize("values", VALUES, ids=[v.stem for v in VALUES])
def test_lint_render_and_server_side_validation(cluster: Cluster, crds: None, helm: Any, values: Path) -> None:
    helm("lint", str(CHART), "-f", str(values))
    docs = render(helm, "-f", str(values))
    for namespace in {"rf-system", *{d["metadata"].get("namespace") for d in docs} - {None}}:
        cluster.kubectl("create", "namespace", namespace, check=False)
    checked = [d for d in docs if d["apiVersion"] not in NOT_ON_THIS_CLUSTER]
    result = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "-f",
        "-",
        check=False,
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": checked}),
    )
    assert result.returncode == 0, result.stderr
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    assert not container["securityContext"]["allowPrivilegeEscalation"]


def test_the_chart_grants_exactly_the_operators_rules(helm: Any) -> None:
    cluster_wide = render(helm)
    assert normalized(rules_of(cluster_wide, "ClusterRole")) == normalized(RULES)
    assert not rules_of(cluster_wide, "Role")
    namespaced = render(helm, "--set", "operator.watchNamespaces={team-a,team-b}")
    assert normalized(rules_of(namespaced, "ClusterRole")) == normalized(CLUSTER)
    roles = [d for d in namespaced if d["kind"] == "Role"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert all(normalized(r["rules"]) == normalized(NAMESPACED) for r in roles)
    assert all("*" not in v for r in rules_of(cluster_wide, "ClusterRole") for v in (*r["verbs"], *r["resources"]))


def test_the_alerts_and_the_dashboard_render_as_promtool_and_grafana_read_them(helm: Any, tmp_path: Path) -> None:
    """The PrometheusRule carries files/alerts.yaml's groups with the runbook links moved to
    runbookBaseUrl, and promtool accepts what was rendered (the API server cannot: the
    monitoring.coreos.com CRDs are not installed here); the ConfigMap (dry-run applied by
    the test above) holds files/dashboard.json verbatim, labelled for Grafana's sidecar."""
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool not found on PATH (make install: Debian's prometheus package)")
    assert promtool is not None
    base = "https://docs.example.com/rf/"
    docs = render(
        helm,
        *("--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true"),
        *(
            "--set",
            f"monitoring.prometheusRule.runbookBaseUrl={base}",
            "--set",
            "monitoring.dashboard.namespace=grafana",
        ),
    )
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    source = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert [r["alert"] for r in alerts] == [r["alert"] for g in source["groups"] for r in g["rules"]]
    assert all(r["annotations"]["runbook_url"].startswith(base + "operations/monitoring/#") for r in alerts)
    rendered = tmp_path / "rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    check = subprocess.run([promtool, "check", "rules", str(rendered)], capture_output=True, text=True, check=False)
    assert check.returncode == 0 and f"SUCCESS: {len(alerts)} rules found" in check.stdout, check.stdout + check.stderr
    board = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard"))
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1" and board["metadata"]["namespace"] == "grafana"
    assert json.loads(board["data"]["rolloutfleet.json"]) == json.loads(
        (CHART / "files" / "dashboard.json").read_text()
    )
    assert not [
        d for d in render(helm) if d["kind"] == "PrometheusRule" or d["metadata"]["name"].endswith("-dashboard")
    ]


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("operator.logLevel=verbose", "logLevel"),
        ("operator.replicaz=2", "replicaz"),
        ("redis.enabled=false", "externalUrl"),
        ("operator.image.pullPolicy=Sometimes", "pullPolicy"),
        ("monitoring.podMonitor.interval=soon", "interval"),
        ("redis.maxClients=5", "maxClients"),
    ],
)
def test_the_values_schema_rejects_bad_values(helm: Any, setting: str, named: str) -> None:
    result = helm("template", "rf", str(CHART), "--set", setting, check=False)
    assert result.returncode != 0 and named in result.stderr, result.stderr


def test_an_external_url_with_a_password_is_rejected_without_showing_it(helm: Any) -> None:
    url = "redis://:Pw9/Qx7#Rz5@redis.example.com:6379/0"
    result = helm("template", "rf", str(CHART), "--set", "redis.enabled=false,redis.auth.existingSecret=s",
                  "--set-string", f"redis.externalUrl={url}", check=False)  # fmt: skip
    assert result.returncode != 0 and "externalUrl" in result.stderr, result.stderr
    assert not any(piece in result.stderr + result.stdout for piece in ("Pw9", "Qx7", "Rz5"))


def test_install_run_the_operator_as_the_chart_does_upgrade_uninstall(
    cluster: Cluster,
    crds: None,
    kubelet: LocalKubelet,
    helm: Any,
    namespace: str,
    redis_server: EmbeddedRedis,
    tmp_path: Path,
) -> None:
    release = "rolloutfleet"
    values = [
        "--set",
        "redis.enabled=false",
        "--set",
        f"redis.externalUrl={redis_server.url}",
        "--set",
        f"operator.watchNamespaces={{{namespace}}}",
    ]
    helm("install", release, str(CHART), "--namespace", namespace, *values)
    deployment = json.loads(
        cluster.kubectl("-n", namespace, "get", "deployment", f"{release}-operator", "-o", "json").stdout
    )
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"][0] == f"--namespace={namespace}"
    # The operator as the Deployment runs it: its command, args and env, its
    # ServiceAccount's token (the chart's RBAC), on this host.
    token = cluster.kubectl("-n", namespace, "create", "token", pod["serviceAccountName"]).stdout.strip()
    kubeconfig = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    kubeconfig["users"] = [{"name": "sa", "user": {"token": token}}]
    kubeconfig["contexts"][0]["context"]["user"] = "sa"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    env = {
        **os.environ,
        **{e["name"]: e["value"] for e in container["env"]},
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        # This single-host test cluster runs pods as local processes on one network:
        "ROLLOUTFLEET_WORKER_COMMAND": json.dumps([sys.executable, "-m", "rolloutfleet.cli.main", "worker"]),
        "ROLLOUTFLEET_WORKER_METRICS_PORT": str(worker_port_block()),
        "ROLLOUTFLEET_WORKER_PORT_PER_INDEX": "1",
    }
    args = [a for a in container["args"] if not a.startswith(("--liveness-port", "--metrics-port"))]
    args += [f"--liveness-port={free_port()}", "--metrics-port=0"]
    with (tmp_path / "operator.log").open("wb") as log:
        operator = subprocess.Popen([*container["command"], *args], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        example = yaml.safe_load((CHART / "examples" / "cartpole.yaml").read_text())
        example["spec"]["redis"] = {"url": redis_server.url}  # the test's Redis instead of the chart's
        example["spec"]["replicas"] = 1
        cluster.kubectl("-n", namespace, "apply", "-f", "-", input=json.dumps(example))

        def running() -> bool:
            out = cluster.kubectl(
                "-n", namespace, "get", "rj", "cartpole", "-o", "jsonpath={.status.readyReplicas}", check=False
            ).stdout
            return out.strip() == "1"

        wait_for(
            running,
            90,
            lambda: describe_namespace(cluster, namespace) + (tmp_path / "operator.log").read_text()[-3000:],
        )
        assert "Forbidden" not in (tmp_path / "operator.log").read_text()
        helm("upgrade", release, str(CHART), "--namespace", namespace, *values, "--set", "operator.logLevel=debug")
        cluster.kubectl("-n", namespace, "delete", "rj", "cartpole", "--timeout=60s")
    finally:
        operator.terminate()
        operator.wait(20)
    helm("uninstall", release, "--namespace", namespace, "--wait")
    left = cluster.kubectl(
        "-n",
        namespace,
        "get",
        "deployment,serviceaccount,role,rolebinding,secret,configmap,service",
        "-l",
        "app.kubernetes.io/instance=rolloutfleet",
        "-o",
        "name",
    ).stdout
    assert left.strip() == ""
    cluster_left = cluster.kubectl("get", "clusterrole,clusterrolebinding", "-o", "name").stdout
    assert "rolloutfleet-operator" not in cluster_left.replace("rolloutfleet-operator-e2e", "")
    assert "rolloutjobs.rolloutfleet.io" in cluster.kubectl("get", "crd", "-o", "name").stdout  # kept, as documented

"""The chart's Redis TLS: the CA and server certificate the chart generates serve a real
redis-server started from the rendered redis.conf, and a client verifies them with the CA
Secret the chart gives clients (which holds no key); an upgrade keeps them (Helm's lookup,
against the real API server); cert-manager mode renders a Certificate instead; plain TCP is
one value away and says so."""

from __future__ import annotations

import base64
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet.transport.redis.connection import RedisUnavailable, check_reachable
from tests.e2e.cluster_kit import Cluster
from tests.e2e.test_chart import CHART, helm, render
from tests.integration.redis_server import redis_server_binary

__all__ = ["helm"]  # the module fixture, shared with test_chart.py

REDIS = "rf-rolloutfleet-redis"


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def secret_files(secret: dict[str, Any], folder: Path) -> dict[str, Path]:
    files = {}
    for key, value in secret["data"].items():
        files[key] = folder / key
        files[key].write_bytes(base64.b64decode(value))
    return files


@pytest.fixture
def served(helm: Any, tmp_path: Path) -> Iterator[tuple[int, dict[str, Path], list[dict[str, Any]]]]:
    """redis-server running the rendered redis.conf with the rendered certificate and key."""
    docs = render(helm)
    files = secret_files(named(docs, "Secret", f"{REDIS}-tls"), tmp_path)
    conf = named(docs, "ConfigMap", REDIS)["data"]["redis.conf"]
    port = free_port()
    conf = conf.replace("/etc/redis/tls", str(tmp_path)).replace("dir /data", f"dir {tmp_path}")
    conf = conf.replace("tls-port 6379", f"tls-port {port}")
    (tmp_path / "redis.conf").write_text(conf + "bind 127.0.0.1\n")
    server = subprocess.Popen([redis_server_binary(), str(tmp_path / "redis.conf")], stdout=subprocess.DEVNULL)
    try:
        yield port, files, docs
    finally:
        server.terminate()
        server.wait(10)


def test_the_generated_certificate_serves_the_rendered_config_and_the_ca_verifies_it(
    served: tuple[int, dict[str, Path], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    port, files, docs = served
    conf = named(docs, "ConfigMap", REDIS)["data"]["redis.conf"]
    assert re.search(r"^\s*port 0$", conf, re.M) and "tls-port 6379" in conf  # TLS only: no plain port
    client_ca = named(docs, "Secret", f"{REDIS}-ca")
    assert set(client_ca["data"]) == {"ca.crt"}  # clients get the CA, never the server's key
    (tmp_path / "client").mkdir()
    ca_file = secret_files(client_ca, tmp_path / "client")
    names = dict(ssl._ssl._test_decode_cert(str(files["tls.crt"])))["subjectAltName"]  # type: ignore[attr-defined]
    assert ("DNS", f"{REDIS}.rf-system.svc") in names and ("DNS", REDIS) in names and ("DNS", "localhost") in names
    monkeypatch.setenv(CA_FILE_ENV, str(ca_file["ca.crt"]))
    check_reachable(f"rediss://localhost:{port}/0", timeout_s=30)  # the chain and the host name verified
    with pytest.raises(RedisUnavailable, match=r"connection reset|closed|refused|TLS"):
        check_reachable(f"redis://localhost:{port}/0", timeout_s=2)  # plain TCP is not served
    operator = named(docs, "Deployment", "rf-rolloutfleet-operator")["spec"]["template"]["spec"]
    volume = next(v for v in operator["volumes"] if v["name"] == "redis-ca")
    assert volume["secret"]["secretName"] == f"{REDIS}-ca" and volume["secret"]["items"] == [
        {"key": "ca.crt", "path": "ca.crt"}
    ]
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    assert env[CA_FILE_ENV] == "/etc/rolloutfleet/redis-ca/ca.crt"


def test_an_upgrade_keeps_the_ca_and_the_certificate(cluster: Cluster, crds: None, helm: Any, namespace: str) -> None:
    """Helm's lookup (``--dry-run=server``) finds the Secret an install made and renders it again, unchanged."""
    first = render(helm, "--namespace", namespace)
    made = [named(first, "Secret", f"{REDIS}-tls"), named(first, "Secret", f"{REDIS}-ca")]
    for secret in made:  # as `helm install` leaves them: owned by the release
        secret["metadata"]["annotations"] = {
            "meta.helm.sh/release-name": "rf",
            "meta.helm.sh/release-namespace": namespace,
        }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": made}))
    out = helm("template", "rf", str(CHART), "--namespace", namespace, "--dry-run=server").stdout
    again = [d for d in yaml.safe_load_all(out) if d]
    for secret in made:
        assert named(again, "Secret", secret["metadata"]["name"])["data"] == secret["data"]
    fresh = render(helm, "--namespace", f"{namespace}-other")  # nothing to look up: a new CA
    assert named(fresh, "Secret", f"{REDIS}-ca")["data"] != made[1]["data"]


def test_cert_manager_issues_the_certificate_when_asked(helm: Any) -> None:
    issuer = "--set=redis.tls.certManager.enabled=true,redis.tls.certManager.issuerRef.name=ca-issuer"
    docs = render(helm, issuer, "--set", "redis.tls.certManager.issuerRef.kind=ClusterIssuer")
    certificate = named(docs, "Certificate", REDIS)
    assert certificate["spec"]["secretName"] == f"{REDIS}-tls"
    assert certificate["spec"]["issuerRef"] == {
        "name": "ca-issuer",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert f"{REDIS}.rf-system.svc" in certificate["spec"]["dnsNames"]
    assert not [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"].startswith(f"{REDIS}-")]
    operator = named(docs, "Deployment", "rf-rolloutfleet-operator")["spec"]["template"]["spec"]
    volume = next(v for v in operator["volumes"] if v["name"] == "redis-ca")
    assert volume["secret"] == {
        "secretName": f"{REDIS}-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
        "defaultMode": 0o444,
    }
    refused = helm("template", "rf", str(CHART), "--set", "redis.tls.certManager.enabled=true", check=False)
    assert refused.returncode != 0 and "redis.tls.certManager.issuerRef.name is required" in refused.stderr


def test_plain_tcp_is_a_value_and_is_named_so(helm: Any) -> None:
    docs = render(helm, "--set", "redis.tls.enabled=false")
    conf = named(docs, "ConfigMap", REDIS)["data"]["redis.conf"]
    assert "tls-port" not in conf and re.search(r"^\s*port 6379$", conf, re.M)
    assert not [d for d in docs if d["kind"] in ("Secret", "Certificate") and "tls" in d["metadata"]["name"]]
    operator = named(docs, "Deployment", "rf-rolloutfleet-operator")["spec"]["template"]["spec"]
    assert [v["name"] for v in operator["volumes"]] == ["tmp"]
    notes = helm("install", "rf", str(CHART), "--dry-run=client", "--set", "redis.tls.enabled=false").stdout
    assert "redis://rf-rolloutfleet-redis" in notes and "plain TCP (redis.tls.enabled: false): unencrypted" in notes
    notes = helm("install", "rf", str(CHART), "--dry-run=client").stdout
    assert 'BatchConsumer("rediss://rf-rolloutfleet-redis' in notes and "ROLLOUTFLEET_REDIS_CA_FILE" in notes

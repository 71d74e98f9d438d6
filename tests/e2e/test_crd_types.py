"""Wrong-typed values on the real API server and in ``rolloutfleet validate``: the same
verdict for each, and the same value stored when both accept (the YAML is parsed by
kubectl on one side and by the CLI on the other, as a user's file would be)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutfleet.cli.main import main
from tests.e2e.cluster_kit import Cluster

# (field under spec, the value as written in YAML)
CASES: list[tuple[str, str]] = [
    ("env.numEnvs", '"8"'),
    ("env.numEnvs", "8"),
    ("env.numEnvs", "8.0"),
    ("env.numEnvs", "8.5"),
    ("env.numEnvs", "true"),
    ("env.numEnvs", "[8]"),
    ("replicas", '"2"'),
    ("replicas", "2.0"),
    ("replicas", "null"),
    ("policy.explore", '"off"'),
    ("policy.explore", "off"),
    ("policy.explore", "1"),
    ("policy.explore", '"true"'),
    ("policy.hidden", "[64.0, 32]"),
    ("policy.hidden", '["64"]'),
    ("policy.numThreads", "null"),
    ("policy.device", "0"),
    ("disruption.maxUnavailable", "1.0"),
    ("disruption.maxUnavailable", '"1"'),
    ("disruption.maxUnavailable", "true"),
    ("redis.blockTimeoutSeconds", "true"),
    ("redis.blockTimeoutSeconds", '"60"'),
    ("redis.blockTimeoutSeconds", "5"),
    ("sampling.seed", "1.5"),
    ("sampling.clipRewards", "null"),
    ("restartPolicy.maxRestarts", "-0.0"),
    ("suspend", '"false"'),
    ("image", "42"),
    ("nodeSelector", "{disk: 1}"),
    ("resources.cpu", "2"),
    ("resources.cpu", "0.5"),
    ("resources.memory", '"1Gi"'),
    ("tolerations", '[{key: gpu, operator: Exists, tolerationSeconds: "30"}]'),
    ("tolerations", "[{key: gpu, operator: Exists, tolerationSeconds: 30.0}]"),
    ("tolerations", "[{key: gpu, operator: Sometimes}]"),
    ("policy.hidden", "[64, null]"),
    ("nodeSelector", "{disk: null}"),
    ("template.metadata.labels", "{team: null}"),
    ("disruption.maxUnavailable", "null"),
    ("extraEnv", "[{name: null, value: x}]"),
    ("extraEnv", "[{name: 5, value: x}]"),
    ("multiAgent", "{policies: {a: {}}, policyMapping: {entryPoint: 'p.m:f'}, policiesToTrain: [null]}"),
    ("env.numEnvs", "1e3"),
    ("redis.blockTimeoutSeconds", "1e1"),
    ("redis.blockTimeoutSeconds", "1.5e1"),
    ("env.numEnvs", "0x10"),
    ("env.numEnvs", "1_0"),
    ("policy.explore", "yes"),
    ("policy.explore", "True"),
    ("image", "1.10"),
]


def manifest_text(path: str, raw: str) -> str:
    spec: dict[str, Any] = {"env": {"id": "CartPole-v1"}}
    node = spec
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = "@@VALUE@@"
    doc = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": "types"}, "spec": spec}
    return yaml.safe_dump(doc, sort_keys=False).replace("'@@VALUE@@'", raw)


def _at(spec: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        spec = spec.get(part, {}) if isinstance(spec, dict) else {}
    return spec


@pytest.mark.parametrize(("path", "raw"), CASES, ids=[f"{p}={r}" for p, r in CASES])
def test_the_api_server_and_validate_give_the_same_verdict(
    cluster: Cluster,
    crds: None,
    namespace: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str,
    raw: str,
) -> None:
    text = manifest_text(path, raw)
    server = cluster.kubectl("-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-", check=False,
                             input=text)  # fmt: skip
    file = tmp_path / "job.yaml"
    file.write_text(text)
    capsys.readouterr()
    code = main(["validate", "--spec-only", str(file)])
    err = capsys.readouterr().err
    assert (server.returncode == 0) == (code == 0), (
        f"spec.{path}: {raw}: API server {'accepts' if server.returncode == 0 else 'refuses'} "
        f"({server.stderr.strip()}), validate {'accepts' if code == 0 else 'refuses'} ({err.strip()})"
    )
    if code != 0:
        assert code == 2 and len(err.strip().splitlines()) == 1 and f"spec.{path}" in err, err
        assert f"spec.{path}" in server.stderr, server.stderr
        return
    from rolloutfleet.spec.job import RolloutJob

    stored = json.loads(server.stdout)["spec"]
    model = RolloutJob.from_file(file).to_dict()["spec"]
    if _at(stored, path) != {}:  # a null the server pruned (and defaulted, or left out) is not compared
        # A quantity is an int or a string on the server, always a string in the model.
        same = str if path.startswith("resources.") else (lambda value: value)
        assert same(_at(stored, path)) == same(_at(model, path)), f"spec.{path}: stored {_at(stored, path)!r}"

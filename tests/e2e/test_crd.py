"""The CRD on the real API server: bad manifests are rejected there, naming the field,
and the worker's own spec model rejects the same manifests naming the same field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from rolloutfleet.spec.job import RolloutJob, SpecError
from tests.e2e.cluster_kit import REPO, Cluster

GOOD: dict[str, Any] = {
    "apiVersion": "rolloutfleet.io/v1alpha1",
    "kind": "RolloutJob",
    "metadata": {"name": "bad"},
    "spec": {"env": {"id": "CartPole-v1"}},
}

_MA = "spec.multiAgent."
A: dict[str, Any] = {"a": {}}
MAP_FN = {"entryPoint": "pkg.mod:policy_for"}
_BOX = {"type": "Box", "shape": [4]}
_TWO = {"type": "Discrete", "n": 2}

# (where to put it, value, the field the API server's message must name, the one pydantic names)
MISTAKES: list[tuple[str, Any, str, str]] = [
    ("spec.env.entryPoint", "pkg.mod:make", "spec.env", "spec.env"),
    ("spec.env", {"numEnvs": 2}, "spec.env", "spec.env"),
    ("spec.env.numEnvs", 0, "spec.env.numEnvs", "spec.env.numEnvs"),
    ("spec.env.vectorization", "threads", "spec.env.vectorization", "spec.env.vectorization"),
    ("spec.sampling.batchMode", "whole_episodes", "spec.sampling.batchMode", "spec.sampling.batchMode"),
    ("spec.sampling.observationFilter", "zscore", "spec.sampling.observationFilter", "spec.sampling.observationFilter"),
    (
        "spec.sampling.rolloutFragmentLength",
        0,
        "spec.sampling.rolloutFragmentLength",
        "spec.sampling.rolloutFragmentLength",
    ),
    ("spec.replicas", -1, "spec.replicas", "spec.replicas"),
    ("spec.typo", 1, "spec.typo", "spec.typo"),
    ("spec.redis.url", "redis://user:secret@redis:6379/0", "spec.redis.url", "spec.redis.url"),
    ("spec.redis.url", "redis://:a/b#c@redis:6379/0", "spec.redis.url", "spec.redis.url"),  # the last @ ends it
    ("spec.redis.url", "redis://redis:6379/0?password=x", "spec.redis.url", "spec.redis.url"),
    ("spec.env.callTimeoutSeconds", 0, "spec.env.callTimeoutSeconds", "spec.env.callTimeoutSeconds"),
    ("spec.redis.backpressure", "dropNewest", "spec.redis.backpressure", "spec.redis.backpressure"),
    ("spec.redis.maxLen", 0, "spec.redis.maxLen", "spec.redis.maxLen"),
    ("spec.policy.device", "tpu", "spec.policy.device", "spec.policy.device"),
    ("spec.policy.hidden", [], "spec.policy.hidden", "spec.policy.hidden"),
    ("spec.policy.activation", "gelu", "spec.policy.activation", "spec.policy.activation"),
    ("spec.resources.gpu", -1, "spec.resources.gpu", "spec.resources.gpu"),
    ("spec.restartPolicy.maxRestarts", -1, "spec.restartPolicy.maxRestarts", "spec.restartPolicy.maxRestarts"),
    ("spec.imagePullPolicy", "Sometimes", "spec.imagePullPolicy", "spec.imagePullPolicy"),
    ("spec.sampling.callbacks", "not an entry point", "spec.sampling.callbacks", "spec.sampling.callbacks"),
    ("spec.multiAgent", {"policies": {"9x": {}}, "policyMapping": MAP_FN}, _MA + "policies", _MA + "policies"),
    ("spec.multiAgent", {"policies": {}, "policyMapping": MAP_FN}, _MA + "policies", _MA + "policies"),
    ("spec.multiAgent", {"policies": A, "policyMapping": {}}, _MA + "policyMapping", _MA + "policyMapping"),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": {**MAP_FN, "default": "a"}},
        _MA + "policyMapping.default",
        _MA + "policyMapping.default",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": {"rules": [{"prefix": "x", "policy": "b"}]}},
        _MA + "policyMapping.rules",
        _MA + "policyMapping.rules[0].policy",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": {"rules": [{"prefix": "x", "regex": "y", "policy": "a"}]}},
        _MA + "policyMapping.rules[0]",
        _MA + "policyMapping.rules[0]",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": {"rules": [{"prefix": "x", "policy": "a"}], "default": "zz"}},
        _MA + "policyMapping.default",
        _MA + "policyMapping.default",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": MAP_FN, "policiesToTrain": ["q"]},
        _MA + "policiesToTrain",
        _MA + "policiesToTrain[0]",
    ),
    (
        "spec.multiAgent",
        {"policies": {"a": {"device": "tpu"}}, "policyMapping": MAP_FN},
        _MA + "policies.a.device",
        _MA + "policies.a.device",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": MAP_FN, "countStepsBy": "x"},
        _MA + "countStepsBy",
        _MA + "countStepsBy",
    ),
    (
        "spec.multiAgent",
        {"policies": A, "policyMapping": MAP_FN, "maxEpisodeSteps": 0},
        _MA + "maxEpisodeSteps",
        _MA + "maxEpisodeSteps",
    ),
    ("spec.env.external", {"port": 70000}, "spec.env.external.port", "spec.env.external.port"),
    ("spec.env.external", {"maxClients": 0}, "spec.env.external.maxClients", "spec.env.external.maxClients"),
    ("spec.env.external", {"observationSpace": _BOX, "actionSpace": _TWO}, "spec.env", "spec.env.external"),
    ("spec.env.external", {"observationSpace": _BOX}, "spec.env.external", "spec.env.external.actionSpace"),
    (
        "spec.env.external",
        {"observationSpace": {"type": "Discrete"}, "actionSpace": _TWO},
        "spec.env.external.observationSpace",
        "spec.env.external.observationSpace.n",
    ),
    ("spec.disruption.maxUnavailable", "120%", "spec.disruption.maxUnavailable", "spec.disruption.maxUnavailable"),
    ("spec.disruption.maxUnavailable", -1, "spec.disruption.maxUnavailable", "spec.disruption.maxUnavailable"),
    ("spec.disruption.nodeLossSeconds", 7200, "spec.disruption.nodeLossSeconds", "spec.disruption.nodeLossSeconds"),
    (
        "spec.template.metadata.labels",
        {"rolloutfleet.io/job": "other"},
        "spec.template.metadata.labels",
        "spec.template.metadata.labels",
    ),
    (
        "spec.template.metadata.labels",
        {"app.kubernetes.io/managed-by": "me"},
        "spec.template.metadata.labels",
        "spec.template.metadata.labels",
    ),
    (
        "spec.template.metadata.labels",
        {"team": "a b"},
        "spec.template.metadata.labels",
        "spec.template.metadata.labels",
    ),
    (
        "spec.template.metadata.annotations",
        {"rolloutfleet.io/template-hash": "x"},
        "spec.template.metadata.annotations",
        "spec.template.metadata.annotations",
    ),
    (
        "spec.autoscaling",
        {"minReplicas": 5, "maxReplicas": 3},
        "spec.autoscaling.minReplicas",
        "spec.autoscaling.minReplicas",
    ),
    (
        "spec.autoscaling",
        {"minReplicas": -1, "maxReplicas": 3},
        "spec.autoscaling.minReplicas",
        "spec.autoscaling.minReplicas",
    ),
    ("spec.autoscaling", {"maxReplicas": 0}, "spec.autoscaling.maxReplicas", "spec.autoscaling.maxReplicas"),
    ("spec.autoscaling", {"minReplicas": 1}, "spec.autoscaling.maxReplicas", "spec.autoscaling.maxReplicas"),
    ("spec.autoscaling.maxReplicas", -4, "spec.autoscaling.maxReplicas", "spec.autoscaling.maxReplicas"),
    (
        "spec",
        {"env": {"id": "CartPole-v1"}, "autoscaling": {"maxReplicas": 2}, "redis": {"backpressure": "dropOldest"}},
        "spec.redis.backpressure",
        "spec.redis.backpressure",
    ),
]


def with_mistake(path: str, value: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(GOOD)
    *parents, leaf = path.split(".")
    node = manifest
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return manifest


@pytest.mark.parametrize(
    ("path", "value", "server_field", "model_field"), MISTAKES, ids=[f"{m[0]}-{m[3]}" for m in MISTAKES]
)
def test_a_bad_manifest_is_rejected_naming_the_field(
    cluster: Cluster, crds: None, namespace: str, path: str, value: Any, server_field: str, model_field: str
) -> None:
    manifest = with_mistake(path, value)
    result = cluster.kubectl("-n", namespace, "create", "-f", "-", check=False, input=json.dumps(manifest))
    assert result.returncode != 0, f"the API server accepted {path}={value!r}"
    assert server_field in result.stderr, result.stderr
    assert cluster.kubectl("-n", namespace, "get", "rj", "-o", "name").stdout.strip() == ""  # nothing created
    with pytest.raises(SpecError, match=re.escape(model_field)):
        RolloutJob.from_dict(manifest)


def test_the_example_manifests_are_accepted(cluster: Cluster, crds: None, namespace: str) -> None:
    examples = sorted((REPO / "examples").glob("*.yaml")) + sorted(
        (REPO / "charts/rolloutfleet/examples").glob("*.yaml")
    )
    assert len(examples) >= 4
    for path in examples:
        for document in yaml.safe_load_all(Path(path).read_text()):
            if document and document.get("kind") == "RolloutJob":
                result = cluster.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", str(path), check=False)
                assert result.returncode == 0, f"{path}: {result.stderr}"


def test_defaults_are_filled_in_by_the_api_server_as_the_model_does(
    cluster: Cluster, crds: None, namespace: str
) -> None:
    result = cluster.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(GOOD)
    )
    stored = json.loads(result.stdout)["spec"]
    model = RolloutJob.from_dict(GOOD).to_dict()["spec"]
    for section in ("env", "sampling", "redis", "restartPolicy", "disruption"):
        for key, value in stored[section].items():
            assert model[section][key] == value, (
                f"spec.{section}.{key}: server default {value!r} != model {model[section][key]!r}"
            )
    assert stored["replicas"] == model["replicas"] and stored["suspend"] == model["suspend"]

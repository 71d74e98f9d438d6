"""One strictness: the spec model and the CRD's openAPIV3Schema give the same verdict on
the same wrong-typed value, for every field the CRD types.

The CRD side is a small validator of the structural schema's rules as the API server
applies them (kube-openapi): ``integer`` takes ints and floats of integral value, never
booleans or strings; ``number`` takes ints and floats; ``boolean`` only true/false;
``x-kubernetes-int-or-string`` an integer or a string; a null where the schema has no
``nullable`` is pruned (then the default applies; required fields are missing). The e2e
test ``tests/e2e/test_crd_types.py`` checks the same cases on the real API server.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.model_base import integral_floats, json_kind, type_message

REPO = Path(__file__).resolve().parents[3]
CRD = next(d for d in yaml.safe_load_all((REPO / "crds/rolloutjobs.rolloutfleet.io.yaml").read_text()) if d)
SPEC_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

BASE: dict[str, Any] = {"metadata": {"name": "types"}, "spec": {"env": {"id": "CartPole-v1"}}}
MULTI = {"policies": {"a": {}}, "policyMapping": {"entryPoint": "pkg.mod:policy_for"}}
KEYS = {"nodeSelector": "disk", "labels": "team", "annotations": "team", "policies": "a"}
"""The key a map field's entry is tried under."""
ITEMS: dict[str, dict[str, Any]] = {
    "wrappers": {"name": "ClipAction"},
    "rules": {"prefix": "x", "policy": "a"},
    "tolerations": {"key": "gpu", "operator": "Exists"},
    "extraEnv": {"name": "A", "value": "1"},
    "ports": {"port": 443},
}
"""A valid item of an array of objects, around the field tried."""
VALID: dict[str, Any] = {
    "redis.url": "redis://redis.rl.svc:6379/0",
    "redis.readReplicas[0]": "redis://redis-replica-0.redis.rl.svc:6379/0",
    "env.id": "CartPole-v1",
    "env.entryPoint": "pkg.mod:make",
    "env.wrappers[0].name": "ClipAction",
    "policy.hidden[0]": 32,
    "policy.entryPoint": "pkg.mod:Net",
    "policy.device": "cpu",
    "policy.exploration.epsilon": 0.1,
    "policy.exploration.sigma": 0.2,
    "policy.exploration.theta": 0.15,
    "policy.exploration.schedule.initial": 1.0,
    "policy.exploration.schedule.final": 0.1,
    "policy.exploration.schedule.steps": 1000,
    "sampling.clipRewards": 1.0,
    "sampling.seed": 7,
    "sampling.callbacks": "pkg.mod:Callbacks",
    "sampling.infos[0]": "step",
    "redis.passwordSecret.name": "redis",
    "redis.adminSecret.name": "redis-admin",
    "redis.shards": 2,
    "redis.tls.caSecret.name": "redis-ca",
    "network.egress[0].ports[0].port": 443,
    "network.egress[0].ports[0].endPort": 8443,
    "image": "worker:1",
    "imagePullPolicy": "Never",
    "resources.cpu": "2",
    "resources.memory": "1Gi",
    "nodeSelector.disk": "ssd",
    "tolerations[0].key": "gpu",
    "tolerations[0].operator": "Exists",
    "tolerations[0].value": "yes",
    "tolerations[0].effect": "NoSchedule",
    "tolerations[0].tolerationSeconds": 30,
    "priorityClassName": "high",
    "serviceAccountName": "workers",
    "extraEnv[0].name": "A",
    "template.metadata.labels.team": "rl",
    "template.metadata.annotations.team": "rl",
    "multiAgent.policyMapping.entryPoint": "pkg.mod:policy_for",
    "multiAgent.policyMapping.rules[0].prefix": "x",
    "multiAgent.policyMapping.rules[0].policy": "a",
    "multiAgent.policyMapping.rules[0].regex": "x.*",
    "multiAgent.policyMapping.default": "a",
    "multiAgent.policies.a.vfShareLayers": False,
    "multiAgent.policies.a.explore": False,
    "multiAgent.policies.a.numThreads": 2,
    "multiAgent.policies.a.stateOut": True,
    "multiAgent.policiesToTrain[0]": "a",
    "autoscaling.maxReplicas": 4,
    "evaluation.maxEpisodeSteps": 500,
    "league.opponent": "b",
    "env.external.observationSpace.type": "Discrete",
    "env.external.observationSpace.shape[0]": 4,
    "env.external.observationSpace.low": -1.0,
    "env.external.observationSpace.high": 1.0,
    "env.external.observationSpace.n": 3,
    "env.external.actionSpace.type": "Discrete",
    "env.external.actionSpace.shape[0]": 2,
    "env.external.actionSpace.low": -1.0,
    "env.external.actionSpace.high": 1.0,
    "env.external.actionSpace.n": 3,
}
"""Fields without a CRD default or enum: a value the model accepts there."""
OBJECTS: dict[str, dict[str, Any]] = {
    "passwordSecret": {"name": "redis"},
    "caSecret": {"name": "redis-ca"},
    "adminSecret": {"name": "redis-admin"},
    "autoscaling": {"maxReplicas": 4},
    "league": {"opponent": "b"},
}
"""What an object made around the field tried holds besides it (its required fields)."""
EXPLORATION = {"epsilon": "epsilonGreedy", "schedule": "epsilonGreedy", "perWorker": "epsilonGreedy",
               "sigma": "gaussian", "theta": "ornsteinUhlenbeck"}  # fmt: skip
"""The exploration type each of its fields applies to."""


def leaves(node: dict[str, Any], path: str = "", required: bool = False) -> list[tuple[str, dict[str, Any], bool]]:
    """(path below spec, schema, whether a null there is refused) of every typed scalar of the
    schema: a null property is pruned unless required, a null array item is refused, a null
    map value is pruned (found on the API server: tests/e2e/test_crd_types.py)."""
    if node.get("x-kubernetes-int-or-string") or node.get("type") not in ("object", "array"):
        return [(path, node, required)] if "type" in node or "anyOf" in node else []
    if node["type"] == "array":
        return leaves(node["items"], f"{path}[0]", required=True)
    if "properties" in node:
        found = []
        for name, prop in node["properties"].items():
            found += leaves(prop, f"{path}.{name}".lstrip("."), name in node.get("required", []))
        return found
    if isinstance(node.get("additionalProperties"), dict) and "type" in node["additionalProperties"]:
        return leaves(node["additionalProperties"], f"{path}.{KEYS[path.rsplit('.', 1)[-1]]}", required=False)
    return []  # free-form (x-kubernetes-preserve-unknown-fields): the model types it, if anyone


LEAVES = [leaf for leaf in leaves(SPEC_SCHEMA) if "multiAgent.policies.a.config" not in leaf[0]]


def valid_value(path: str, schema: dict[str, Any]) -> Any:
    if path in VALID:
        return VALID[path]
    generic = path.replace("multiAgent.policies.a.", "policy.")
    if generic in VALID:
        return VALID[generic]
    if schema.get("default") is not None:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    raise AssertionError(f"spec.{path}: no valid value known; add one to VALID")


def _parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    for part in path.split("."):
        name, _, index = part.partition("[")
        parts += [name] + ([int(index.rstrip("]"))] if index else [])
    return parts


def manifest_with(path: str, value: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(BASE)
    spec = manifest["spec"]
    if path.startswith("multiAgent."):
        spec["multiAgent"] = copy.deepcopy(MULTI)
        if path.startswith("multiAgent.policyMapping.rules"):
            spec["multiAgent"]["policyMapping"] = {"rules": [dict(ITEMS["rules"])]}
        if path.startswith("multiAgent.policyMapping.default"):
            spec["multiAgent"]["policyMapping"] = {"rules": [dict(ITEMS["rules"])]}
    if path.startswith("league."):
        # a league's opponent is an untrained policy of a multi-agent job
        spec["multiAgent"] = {**copy.deepcopy(MULTI), "policies": {"a": {}, "b": {}}, "policiesToTrain": ["a"]}
    if ".exploration." in f".{path}":
        section = spec.setdefault("policy", {}) if path.startswith("policy.") else spec["multiAgent"]["policies"]["a"]
        field = path.split(".exploration.")[1].split(".")[0]
        section["exploration"] = {"type": EXPLORATION.get(field, "stochastic")}
        if field == "schedule":
            section["exploration"]["schedule"] = {"initial": 1.0, "final": 0.1, "steps": 10}
    if path.startswith("redis.tls."):
        spec["redis"] = {"url": "rediss://redis:6379/0"}  # a CA verifies a TLS server
    if path == "env.entryPoint":
        del spec["env"]["id"]  # one of the two
    if path.startswith(("env.external.observationSpace.", "env.external.actionSpace.")):
        # a declared space holds the fields of its type: Discrete has n, Box the others
        field = _parts(path)[3]
        space = {"type": "Discrete", "n": 2} if field in ("n", "type") else {"type": "Box", "shape": [4]}
        other = "actionSpace" if _parts(path)[2] == "observationSpace" else "observationSpace"
        spec["env"]["external"] = {str(_parts(path)[2]): space, other: {"type": "Discrete", "n": 2}}
        del spec["env"]["id"]  # the spaces are given once
    if path == "multiAgent.policyMapping.rules[0].regex":
        spec["multiAgent"]["policyMapping"]["rules"][0].pop("prefix")  # one of the two
    parts = _parts(path)
    node: Any = spec
    for index, (part, following) in enumerate(itertools.pairwise(parts)):
        if isinstance(part, int):
            while len(node) <= part:
                node.append(copy.deepcopy(ITEMS.get(str(parts[index - 1]), {})))
        elif part not in node:
            node[part] = [] if isinstance(following, int) else copy.deepcopy(OBJECTS.get(part, {}))
        node = node[part]
    if isinstance(parts[-1], int):
        del node[parts[-1] :]
        node.append(value)
    else:
        node[parts[-1]] = value
    return manifest


def model_refuses(path: str, value: Any) -> str | None:
    """The model's complaint about ``spec.<path>`` itself (an item's: or its list's), or None."""
    try:
        RolloutJob.from_dict(manifest_with(path, value))
    except SpecError as exc:
        where = (f"{path}: ", f"{path.removesuffix('[0]')}: ")
        named = [p for p in str(exc).split("; spec.") if p.removeprefix("spec.").startswith(where)]
        return named[0] if named else None
    return None


TYPE_COMPLAINT = re.compile(r": must be an? [a-z ()]+, got .+ \((an? \w+|null)\)$")
"""How the model refuses a value for its type (:func:`rolloutfleet.spec.model_base.type_message`)."""


def crd_accepts(schema: dict[str, Any], value: Any, required: bool) -> bool:
    """The API server's verdict on ``value`` at a leaf of ``schema`` (type, null, enum, bounds)."""
    if value is None:
        return bool(schema.get("nullable")) or not required  # pruned: defaulted, or left out
    is_int = isinstance(value, int) and not isinstance(value, bool)
    integral = is_int or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if schema.get("x-kubernetes-int-or-string"):
        return integral or isinstance(value, str)
    kind = schema["type"]
    if (kind == "integer" and not integral) or (kind == "number" and not (is_int or isinstance(value, float))):
        return False
    if (kind == "boolean" and not isinstance(value, bool)) or (kind == "string" and not isinstance(value, str)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False  # JSON has no inf or NaN
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "minimum" in schema and (
        value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])
    ):
        return False
    return not ("maximum" in schema and value > schema["maximum"])


def wrong_typed(valid: Any) -> list[Any]:
    """What a user types instead of ``valid``: it quoted, as a bool, a float, a list, null, ..."""
    values: list[Any] = [str(valid).lower() if isinstance(valid, bool) else str(valid), None, [valid], {"v": valid}]
    if isinstance(valid, bool):
        values += [int(valid), "off", "yes", float(valid)]
    elif isinstance(valid, int):
        values += [True, False, float(valid), valid + 0.5, f"{valid}.0"]
    elif isinstance(valid, float):
        values += [True, False, int(valid), f"{valid}"]
    else:
        values += [8, 8.0, 8.5, True]
    return values


@pytest.mark.parametrize(("path", "schema", "required"), LEAVES, ids=[leaf[0] for leaf in LEAVES])
def test_every_typed_field_has_a_valid_value_the_model_accepts(
    path: str, schema: dict[str, Any], required: bool
) -> None:
    value = valid_value(path, schema)
    assert crd_accepts(schema, value, required), f"spec.{path}: {value!r} is not valid for the CRD"
    RolloutJob.from_dict(manifest_with(path, value))


@pytest.mark.parametrize(("path", "schema", "required"), LEAVES, ids=[leaf[0] for leaf in LEAVES])
def test_wrong_types_get_the_crd_s_verdict_naming_the_field(path: str, schema: dict[str, Any], required: bool) -> None:
    for value in wrong_typed(valid_value(path, schema)):
        same_verdict(path, schema, required, value)


def _any_json() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**40), max_value=2**40),
        st.floats(allow_nan=False, allow_infinity=False, width=64),
        st.sampled_from(["8", "true", "off", "1.0", "", "yes", "null"]),
    )
    return st.one_of(
        scalars, st.lists(scalars, max_size=2), st.dictionaries(st.sampled_from(["a", "v"]), scalars, max_size=1)
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(leaf=st.sampled_from(LEAVES), value=_any_json())
def test_any_json_value_gets_the_crd_s_verdict(leaf: tuple[str, dict[str, Any], bool], value: Any) -> None:
    """Random values of every JSON type at every typed field; free strings only where the
    field is not a string (a string's own syntax is a value rule, compared in test_crd.py)."""
    path, schema, required = leaf
    if isinstance(value, str) and (schema.get("type") == "string" or schema.get("x-kubernetes-int-or-string")):
        return
    if (
        schema.get("x-kubernetes-int-or-string")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and value < 0
    ):
        return  # a negative count or quantity is a value rule (the CEL rules and the model's), not a type
    same_verdict(path, schema, required, value)


def same_verdict(path: str, schema: dict[str, Any], required: bool, value: Any) -> None:
    refused = model_refuses(path, value)
    if crd_accepts(schema, value, required):
        # Accepted by the CRD: the model may refuse only by a value rule of its own (a
        # range that depends on another field), never for the value's type.
        assert refused is None or not TYPE_COMPLAINT.search(refused), (
            f"spec.{path} = {value!r}: the CRD accepts, the model refuses its type: {refused}"
        )
    else:
        assert refused is not None, f"spec.{path} = {value!r}: the CRD refuses, the model accepts"


def test_the_issue_s_values_are_refused_in_one_line_naming_the_field() -> None:
    for path, value, expected in [
        ("env.numEnvs", "8", 'spec.env.numEnvs: must be an integer, got "8" (a string)'),
        ("replicas", "2", 'spec.replicas: must be an integer, got "2" (a string)'),
        ("policy.explore", "off", 'spec.policy.explore: must be a boolean (true or false), got "off" (a string)'),
        ("env.numEnvs", True, "spec.env.numEnvs: must be an integer, got true (a boolean)"),
    ]:
        with pytest.raises(SpecError) as raised:
            RolloutJob.from_dict(manifest_with(path, value))
        assert str(raised.value) == expected


def test_what_the_api_server_stores_is_what_the_model_reads() -> None:
    job = RolloutJob.from_dict(manifest_with("env.numEnvs", 8.0))
    assert job.spec.env.num_envs == 8 and type(job.spec.env.num_envs) is int
    assert RolloutJob.from_dict(manifest_with("replicas", None)).spec.replicas == 1  # pruned, defaulted
    assert RolloutJob.from_dict(manifest_with("policy.hidden", [64.0, 32])).spec.policy.hidden == [64, 32]
    assert RolloutJob.from_dict(manifest_with("resources.cpu", 2)).spec.resources.cpu == "2"


def test_a_mapping_view_and_tuples_are_read_as_json_is() -> None:
    """Strict validation takes dicts only: a Mapping that is not one (kopf's views) is copied."""
    view = MappingProxyType({"env": MappingProxyType({"id": "CartPole-v1"}), "policy": {"hidden": (8, 8)}})
    job = RolloutJob.from_dict({"metadata": {"name": "view"}, "spec": view})
    assert job.spec.env.id == "CartPole-v1" and job.spec.policy.hidden == [8, 8]
    spec = {"env": {"id": "CartPole-v1", "numEnvs": np.int64(4)}, "sampling": {"clipRewards": np.float32(1.5)}}
    job = RolloutJob.from_dict({"metadata": {"name": "numpy"}, "spec": spec})
    assert job.spec.env.num_envs == 4 and job.spec.sampling.clip_rewards == 1.5


def test_helpers() -> None:
    assert integral_floats(3.0, int | None) == 3 and integral_floats(3.0, float) == 3.0
    assert json_kind([1]) == "a list" and json_kind({}) == "a mapping"
    assert type_message("greater_than", 1) is None

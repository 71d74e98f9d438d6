"""The CRD, the spec model and the chart agree (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rolloutfleet.spec.job import RolloutJobSpec

REPO = Path(__file__).resolve().parents[3]
CRD_PATH = REPO / "crds" / "rolloutjobs.rolloutfleet.io.yaml"


def crd() -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(CRD_PATH.read_text()) if d)


def schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def resolve(path: str) -> dict[str, Any]:
    node = schema()
    for part in path.strip(".").split("."):
        node = node["properties"][part]
    return node


def test_every_printer_column_and_scale_path_exists_in_the_schema() -> None:
    version = crd()["spec"]["versions"][0]
    for column in version["additionalPrinterColumns"]:
        if column["jsonPath"].startswith(".metadata."):
            continue
        assert resolve(column["jsonPath"])["type"] in ("integer", "number", "string"), column
    scale = version["subresources"]["scale"]
    assert resolve(scale["specReplicasPath"])["type"] == "integer"
    assert resolve(scale["statusReplicasPath"])["type"] == "integer"
    assert resolve(scale["labelSelectorPath"])["type"] == "string"
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == [
        "Desired",
        "Ready",
        "Phase",
        "Restarts",
        "Steps/s",
        "Reason",
        "Age",
        "Image",
        "Autoscaling",
        "Eval",
        "League",
    ]
    # The image, the autoscaler's reason, the evaluation and the league's standings only under
    # `kubectl get rj -o wide`: they are long.
    assert [c.get("priority", 0) for c in version["additionalPrinterColumns"]] == [0] * 7 + [1, 1, 1, 1]


def _model_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {(field.alias or name): field for name, field in model.model_fields.items()}


def _literal_values(annotation: Any) -> set[str]:
    if get_origin(annotation) is Literal:
        return {a for a in get_args(annotation) if isinstance(a, str)}
    return set().union(*(_literal_values(a) for a in get_args(annotation)))


def _nested(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The model inside ``annotation`` and where its schema sits: "" (an object), "items"
    (``list[Model]``) or "additionalProperties" (``dict[str, Model]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list and args:
        found = _nested(args[0])
        return (found[0], "items") if found else None
    if origin is dict and len(args) == 2:
        found = _nested(args[1])
        return (found[0], "additionalProperties") if found else None
    for arg in args:  # Optional[...] / unions
        if (found := _nested(arg)) is not None:
            return found
    return None


SECTIONS = [
    "",
    "env",
    "env.wrappers",
    "env.external",
    "env.external.observationSpace",
    "env.external.actionSpace",
    "policy",
    "policy.exploration",
    "policy.exploration.perWorker",
    "policy.exploration.schedule",
    "policy.recurrent",
    "sampling",
    "multiAgent",
    "multiAgent.policies",
    "multiAgent.policies.exploration",
    "multiAgent.policies.exploration.perWorker",
    "multiAgent.policies.exploration.schedule",
    "multiAgent.policies.recurrent",
    "multiAgent.policyMapping",
    "multiAgent.policyMapping.rules",
    "league",
    "redis",
    "redis.passwordSecret",
    "redis.tls",
    "redis.tls.caSecret",
    "network",
    "network.egress",
    "network.egress.ports",
    "redis.adminSecret",
    "restartPolicy",
    "resources",
    "template",
    "template.metadata",
    "disruption",
    "autoscaling",
    "evaluation",
]


def _section(path: str) -> tuple[type[BaseModel], dict[str, Any]]:
    model: type[BaseModel] = RolloutJobSpec
    node = resolve("spec")
    for part in path.split(".") if path else []:
        found = _nested(_model_fields(model)[part].annotation)
        assert found is not None, f"spec.{path}: {part} is not a nested model in spec.py"
        model, where = found
        node = node["properties"][part]
        if where:
            node = node[where]
    return model, node


@pytest.mark.parametrize("section", SECTIONS)
def test_crd_and_spec_model_have_the_same_fields_and_defaults(section: str) -> None:
    model, node = _section(section)
    fields = _model_fields(model)
    assert set(node["properties"]) == set(fields), f"spec.{section}: CRD and model differ"
    for name, field in fields.items():
        prop = node["properties"][name]
        if "default" in prop and not isinstance(prop["default"], dict):
            default = field.get_default(call_default_factory=True)
            assert prop["default"] == default, f"spec.{section}.{name}: CRD default {prop['default']!r} != {default!r}"
        values = _literal_values(field.annotation)
        assert ("enum" in prop) == bool(values), f"spec.{section}.{name}: enum in one of CRD and model only"
        if values:
            assert set(prop["enum"]) == values, f"spec.{section}.{name}: enum differs"
        if field.is_required():
            assert name in node.get("required", []), f"spec.{section}.{name}: required by the model, not the CRD"


def test_every_model_section_is_compared() -> None:
    """A nested model added to spec.py without a line in SECTIONS would go unchecked."""
    seen: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in _model_fields(model).items():
            found = _nested(field.annotation)
            if found is not None:
                path = f"{prefix}.{name}" if prefix else name
                seen.add(path)
                walk(found[0], path)

    walk(RolloutJobSpec, "")
    assert seen <= set(SECTIONS), f"nested models without a CRD comparison: {sorted(seen - set(SECTIONS))}"


def test_the_chart_ships_the_same_crds_byte_for_byte() -> None:
    for path in (REPO / "crds").glob("*.yaml"):
        assert (REPO / "charts/rolloutfleet/crds" / path.name).read_bytes() == path.read_bytes(), path.name
    assert {p.name for p in (REPO / "charts/rolloutfleet/crds").glob("*.yaml")} == {
        p.name for p in (REPO / "crds").glob("*.yaml")
    }


def _bounds(field: Any) -> dict[str, Any]:
    """The CRD keywords a model field's ``ge``/``gt``/``le`` constraints stand for."""
    bounds: dict[str, Any] = {}
    for meta in field.metadata:
        if getattr(meta, "ge", None) is not None:
            bounds["minimum"] = meta.ge
        if getattr(meta, "gt", None) is not None:
            bounds["minimum"], bounds["exclusiveMinimum"] = meta.gt, True
        if getattr(meta, "le", None) is not None:
            bounds["maximum"] = meta.le
    return bounds


@pytest.mark.parametrize("section", SECTIONS)
def test_crd_and_spec_model_have_the_same_bounds(section: str) -> None:
    model, node = _section(section)
    for name, field in _model_fields(model).items():
        prop = node["properties"][name]
        in_crd = {k: prop[k] for k in ("minimum", "exclusiveMinimum", "maximum") if k in prop}
        assert in_crd == _bounds(field), f"spec.{section}.{name}: CRD {in_crd} != model {_bounds(field)}"


def test_hidden_layers_have_the_model_s_limits_in_the_crd() -> None:
    from rolloutfleet.spec.job import MAX_LAYER_WIDTH, MAX_LAYERS

    for section in ("policy", "multiAgent.policies"):
        hidden = _section(section)[1]["properties"]["hidden"]
        assert hidden["maxItems"] == MAX_LAYERS and hidden["items"]["maximum"] == MAX_LAYER_WIDTH, section


def test_the_crd_knows_the_wrappers_the_model_knows() -> None:
    """Names and count in the CRD; the arguments are free-form values (ints, floats, bools,
    strings) that a structural schema cannot type, so CEL cannot see them: the model checks
    them (the operator reports its one line in the job's status)."""
    from rolloutfleet.spec.sections.wrappers_spec import MAX_WRAPPERS, WRAPPERS

    wrappers = _section("env")[1]["properties"]["wrappers"]
    assert wrappers["maxItems"] == MAX_WRAPPERS
    assert wrappers["items"]["properties"]["name"]["enum"] == list(WRAPPERS)
    assert wrappers["items"]["properties"]["args"]["maxProperties"] >= max(len(t.all) for t in WRAPPERS.values())
    assert "x-kubernetes-validations" not in wrappers["items"]  # they would not compile (no type for args)

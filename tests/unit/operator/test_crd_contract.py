"""The CRD, the spec model and the chart agree (no server needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rolloutfleet.spec import RolloutJobSpec

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
    assert names == ["Desired", "Ready", "Phase", "Restarts", "Steps/s", "Age"]


def _model_fields(model: type[BaseModel]) -> dict[str, Any]:
    return {(field.alias or name): field for name, field in model.model_fields.items()}


def _literal_values(annotation: Any) -> set[str]:
    if get_origin(annotation) is Literal:
        return {a for a in get_args(annotation) if isinstance(a, str)}
    return set().union(*(_literal_values(a) for a in get_args(annotation)))


def _nested(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


@pytest.mark.parametrize("section", ["", "env", "policy", "sampling", "redis", "restartPolicy", "resources"])
def test_crd_and_spec_model_have_the_same_fields_and_defaults(section: str) -> None:
    model: type[BaseModel] = RolloutJobSpec
    node = resolve("spec")
    if section:
        nested = _nested(_model_fields(RolloutJobSpec)[section].annotation)
        assert nested is not None
        model, node = nested, node["properties"][section]
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


def test_the_chart_ships_the_same_crds_byte_for_byte() -> None:
    for path in (REPO / "crds").glob("*.yaml"):
        assert (REPO / "charts/rolloutfleet/crds" / path.name).read_bytes() == path.read_bytes(), path.name
    assert {p.name for p in (REPO / "charts/rolloutfleet/crds").glob("*.yaml")} == {
        p.name for p in (REPO / "crds").glob("*.yaml")
    }

"""The RolloutJob reference page from the CRD's ``openAPIV3Schema``: one row per field,
with its type, default, validation and description, as the API server enforces them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

CRD = Path(__file__).resolve().parent.parent / "crds" / "rolloutjobs.rolloutfleet.io.yaml"

# Schema keywords shown in the validation column, in this order, with their wording.
_BOUNDS = (
    ("minimum", ">= {}"),
    ("maximum", "<= {}"),
    ("exclusiveMinimum", "> {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("pattern", "matches `{}`"),
    ("minItems", "items >= {}"),
    ("maxItems", "items <= {}"),
    ("maxProperties", "keys <= {}"),
    ("format", "format {}"),
)


def load_schema(path: Path = CRD) -> dict[str, Any]:
    """The served version's ``openAPIV3Schema`` of the RolloutJob CRD at ``path``."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    crd = next(d for d in docs if d.get("kind") == "CustomResourceDefinition")
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _type(node: dict[str, Any]) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"array of {_type(node.get('items', {}))}"
    if kind == "object" and "additionalProperties" in node and "properties" not in node:
        return f"map of {_type(node['additionalProperties'])}"
    return kind


def _validation(node: dict[str, Any], required: bool) -> str:
    rules = ["required"] if required else []
    if "enum" in node:
        rules.append("one of " + ", ".join(f"`{json.dumps(v)}`" for v in node["enum"]))
    rules += [f"{fmt.format(node[key])}" for key, fmt in _BOUNDS if key in node]
    if node.get("nullable"):
        rules.append("nullable")
    for rule in node.get("x-kubernetes-validations", []):
        rules.append(f"CEL `{rule['rule']}`" + (f": {rule['message']}" if "message" in rule else ""))
    return "; ".join(_cell(r) for r in rules)


def fields(node: dict[str, Any], path: str, required: bool = False) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Every field under ``node`` depth first, as (dotted path, schema node, required)."""
    yield path, node, required
    needed = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        yield from fields(child, f"{path}.{name}", name in needed)
    items = node.get("items")
    if isinstance(items, dict) and "properties" in items:
        for name, child in items["properties"].items():
            yield from fields(child, f"{path}[].{name}", name in set(items.get("required", [])))


def _table(schema: dict[str, Any], root: str) -> list[str]:
    rows = ["| field | type | default | validation | description |", "| --- | --- | --- | --- | --- |"]
    for path, node, required in fields(schema["properties"][root], root):
        if path == root:
            continue
        default = f"`{_cell(json.dumps(node['default']))}`" if "default" in node else ""
        description = _cell(str(node.get("description", "")))
        rows.append(f"| `{path}` | {_type(node)} | {default} | {_validation(node, required)} | {description} |")
    return rows


def render(schema: dict[str, Any]) -> str:
    """The Markdown page: the spec's fields, then the status's."""
    lines = [
        "# RolloutJob reference",
        "",
        "Generated at build time from the CRD's `openAPIV3Schema` (`crds/rolloutjobs.rolloutfleet.io.yaml`):",
        "what the API server validates and defaults. `rolloutfleet validate` and the workers apply the",
        "same rules (a contract test compares the CRD with the spec model field by field).",
        "",
    ]
    top = schema["properties"]["spec"]
    for rule in top.get("x-kubernetes-validations", []):
        lines.append(f"- `spec`: CEL `{rule['rule']}`" + (f": {rule['message']}" if "message" in rule else ""))
    lines += ["", "## spec", "", *_table(schema, "spec")]
    if "status" in schema["properties"]:
        lines += ["", "## status", "", "Written by the operator; read-only for users.", "", *_table(schema, "status")]
    return "\n".join(lines) + "\n"

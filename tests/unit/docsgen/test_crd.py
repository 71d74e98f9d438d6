"""The RolloutJob reference page follows the CRD: every field, and a changed schema changes the page."""

from __future__ import annotations

from pathlib import Path

import yaml

from docsgen import crd


def test_every_field_of_the_crd_has_a_row_with_its_type_default_bounds_and_description() -> None:
    schema = crd.load_schema()
    page = crd.render(schema)
    spec = schema["properties"]["spec"]
    for path, _node, _required in crd.fields(spec, "spec"):
        if path != "spec":
            assert f"| `{path}` |" in page, path
    num_envs = spec["properties"]["env"]["properties"]["numEnvs"]
    row = next(line for line in page.splitlines() if line.startswith("| `spec.env.numEnvs` |"))
    assert f"`{num_envs['default']}`" in row and f">= {num_envs['minimum']}" in row
    assert f"<= {num_envs['maximum']}" in row and num_envs["description"] in row
    backpressure = spec["properties"]["redis"]["properties"]["backpressure"]
    row = next(line for line in page.splitlines() if line.startswith("| `spec.redis.backpressure` |"))
    assert all(f'`"{value}"`' in row for value in backpressure["enum"])
    assert "## status" in page and "| `status.phase` |" in page


def test_changing_a_description_in_the_schema_changes_the_page(tmp_path: Path) -> None:
    docs = list(yaml.safe_load_all(crd.CRD.read_text()))
    crd_doc = next(d for d in docs if d and d["kind"] == "CustomResourceDefinition")
    schema = crd_doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    replicas = schema["properties"]["spec"]["properties"]["replicas"]
    replicas["description"] = "Worker pods, as edited by this test | with a pipe."
    replicas["maximum"] = 77
    copy = tmp_path / "crd.yaml"
    copy.write_text(yaml.safe_dump_all(docs))

    before = crd.render(crd.load_schema())
    after = crd.render(crd.load_schema(copy))
    assert before != after
    row = next(line for line in after.splitlines() if line.startswith("| `spec.replicas` |"))
    assert "Worker pods, as edited by this test \\| with a pipe." in row and "<= 77" in row
    assert "as edited by this test" not in before


def test_cel_rules_and_array_items_are_listed() -> None:
    schema = {
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "has(self.a) != has(self.b)", "message": "a xor b"}],
                "required": ["items"],
                "properties": {
                    "items": {
                        "type": "array",
                        "maxItems": 3,
                        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
                    },
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        }
    }
    page = crd.render(schema)
    assert "CEL `has(self.a) != has(self.b)`: a xor b" in page
    assert "| `spec.items` | array of object |  | required; items <= 3 |" in page
    assert "| `spec.items[].name` | string |  | required |" in page
    assert "| `spec.labels` | map of string |" in page

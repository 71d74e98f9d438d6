"""YAML read as kubectl reads it (the e2e test tests/e2e/test_crd_types.py compares with
the real API server), and YAML errors in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.manifest_yaml import load_documents, yaml_problem

MANIFEST = "metadata: {{name: y}}\nspec:\n  env: {{id: CartPole-v1, numEnvs: {}}}\n"


@pytest.mark.parametrize(
    ("text", "value"),
    [("1e3", 1000.0), ("1.5e1", 15.0), ("-2E-1", -0.2), (".5", 0.5), ("10", 10), ("0x10", 16), ("1_0", 10),
     ("yes", True), ("off", False), ("1.10", 1.1), (".inf", float("inf")), ("1e3x", "1e3x"), ("v1e3", "v1e3")],
)  # fmt: skip
def test_scalars_are_what_kubectl_reads(text: str, value: object) -> None:
    assert load_documents(f"a: {text}") == [{"a": value}]


def test_an_exponent_without_a_dot_is_a_number_in_a_manifest(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(MANIFEST.format("1e1"))
    assert RolloutJob.from_file(path).spec.env.num_envs == 10  # kubectl sends 10.0: the API server stores 10
    path.write_text(MANIFEST.format("1.25e1"))
    with pytest.raises(SpecError, match=r"spec.env.numEnvs: must be an integer, got 12.5 \(a number\)"):
        RolloutJob.from_file(path)


@pytest.mark.parametrize("text", ['"', "\x1f", "a: [1, 2", "a: b: c", "- a\nb: 1", "{"])
def test_a_yaml_error_is_one_line(text: str, tmp_path: Path) -> None:
    with pytest.raises(yaml.YAMLError) as raised:
        load_documents(text)
    assert "\n" not in yaml_problem(raised.value) and yaml_problem(raised.value)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as failed:
        RolloutJob.from_file(path)
    assert "\n" not in str(failed.value) and "not valid YAML: " in str(failed.value)

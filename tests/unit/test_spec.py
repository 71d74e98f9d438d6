"""The RolloutJob model: valid manifests load, each mistake is named, no heavy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet.spec import RolloutJob, SpecError

ROOT = Path(__file__).resolve().parents[2]


def manifest(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"env": {"id": "CartPole-v1"}}
    base.update(spec)
    return {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": "cp"}, "spec": base}


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")))
def test_examples_validate(path: Path) -> None:
    job = RolloutJob.from_file(path)
    assert job.spec.env.num_envs >= 1


def test_defaults_and_camel_case_round_trip() -> None:
    job = RolloutJob.from_dict(manifest(sampling={"rolloutFragmentLength": 50, "batchMode": "complete_episodes"}))
    assert job.spec.sampling.rollout_fragment_length == 50
    assert job.spec.policy.hidden == [64, 64]
    assert job.spec.policy.device == "auto"
    assert job.namespace == "default"
    again = RolloutJob.from_dict(job.to_dict())
    assert again == job
    assert job.to_dict()["spec"]["sampling"]["batchMode"] == "complete_episodes"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"sampling": {"batchMode": "whole"}}, "spec.sampling.batchMode"),
        ({"env": {"id": "CartPole-v1", "numEnvs": 0}}, "spec.env.numEnvs"),
        ({"env": {"id": "CartPole-v1", "entryPoint": "a.b:c"}}, "spec.env"),
        ({"env": {}}, "spec.env"),
        ({"env": {"entryPoint": "not an entry point"}}, "spec.env.entryPoint"),
        ({"policy": {"device": "tpu"}}, "spec.policy.device"),
        ({"policy": {"hidden": [64, 0]}}, "spec.policy.hidden"),
        ({"sampling": {"observationFilter": "zscore"}}, "spec.sampling.observationFilter"),
        ({"sampling": {"clipRewards": -1}}, "spec.sampling.clipRewards"),
        ({"sampling": {"rolloutFragmentLenght": 10}}, "spec.sampling.rolloutFragmentLenght"),
        ({"replicas": -1}, "spec.replicas"),
        ({"redis": {"url": "http://x"}}, "spec.redis.url"),
        ({"redis": {"url": "redis://:hunter2@redis:6379"}}, "spec.redis.url"),
        ({"redis": {"backpressure": "drop"}}, "spec.redis.backpressure"),
        ({"env": {"entryPoint": "pkg:make", "vectorization": "vector"}}, "spec.env"),
    ],
)
def test_each_mistake_names_its_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as error:
        RolloutJob.from_dict(manifest(**spec))
    message = str(error.value)
    assert message.startswith(field), message
    assert "Traceback" not in message
    assert "hunter2" not in message


def test_bad_name_and_missing_spec() -> None:
    with pytest.raises(SpecError, match=r"metadata\.name"):
        RolloutJob.from_dict({"metadata": {"name": "Not_A_Label"}, "spec": {"env": {"id": "CartPole-v1"}}})
    with pytest.raises(SpecError, match="spec: Field required"):
        RolloutJob.from_dict({"metadata": {"name": "x"}})
    with pytest.raises(SpecError, match="must be a mapping"):
        RolloutJob.from_dict(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_from_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read"):
        RolloutJob.from_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        RolloutJob.from_file(broken)
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: RolloutJob\nmetadata: {name: x}\nspec: {env: {id: CartPole-v1, numEnvs: 0}}\n")
    with pytest.raises(SpecError, match=rf"{bad}: spec\.env\.numEnvs"):
        RolloutJob.from_file(bad)


def test_the_spec_imports_neither_torch_nor_gymnasium() -> None:
    code = (
        "import sys, rolloutfleet, rolloutfleet.spec;"
        "rolloutfleet.RolloutJob.from_file('examples/cartpole.yaml');"
        "heavy = {'torch', 'gymnasium', 'redis'} & set(sys.modules);"
        "sys.exit(f'imported {heavy}' if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr

"""The RolloutJob model: valid manifests load, each mistake is named, no heavy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError

ROOT = Path(__file__).resolve().parents[3]


def manifest(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"env": {"id": "CartPole-v1"}}
    base.update(spec)
    return {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": "cp"}, "spec": base}


def _ma(**fields: Any) -> dict[str, Any]:
    """A spec.multiAgent with one policy 'red' mapped by an entry point, with ``fields`` changed."""
    multi: dict[str, Any] = {"policies": fields.pop("policies", {"red": {}}), "policyMapping": {"entryPoint": "m:f"}}
    for key in ("rules", "default", "entryPoint"):
        if key in fields:
            multi["policyMapping"][key] = fields.pop(key)
    if (
        "rules" in multi["policyMapping"]
        and "entryPoint" not in fields
        and multi["policyMapping"]["entryPoint"] == "m:f"
    ):
        del multi["policyMapping"]["entryPoint"]
    return {**multi, **fields}


def test_multi_agent_policies_override_the_policy_defaults() -> None:
    multi_agent = {
        "policies": {"red": {"hidden": [8]}, "blue": {}},
        "policyMapping": {"rules": [{"prefix": "r", "policy": "red"}], "default": "blue"},
        "policiesToTrain": ["red"],
    }
    job = RolloutJob.from_dict(manifest(policy={"hidden": [32], "activation": "relu"}, multiAgent=multi_agent))
    multi = job.spec.multi_agent
    assert multi is not None and multi.trained_policies == ["red"] and multi.count_steps_by == "env_steps"
    red = multi.policies["red"].apply(job.spec.policy)
    assert red.hidden == [8] and red.activation == "relu"
    assert multi.policies["blue"].apply(job.spec.policy) == job.spec.policy
    again = RolloutJob.from_dict(job.to_dict())  # what workers receive: nulls mean "inherit"
    assert again.spec.multi_agent is not None
    assert again.spec.multi_agent.policies["blue"].apply(job.spec.policy) == job.spec.policy


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
        ({"redis": {"shards": 65}}, "spec.redis.shards"),
        ({"redis": {"shards": 0}}, "spec.redis.shards"),
        ({"env": {"entryPoint": "pkg:make", "vectorization": "vector"}}, "spec.env"),
        (
            {"multiAgent": _ma(rules=[{"prefix": "a", "policy": "green"}])},
            "spec.multiAgent.policyMapping.rules[0].policy",
        ),
        (
            {"multiAgent": _ma(rules=[{"prefix": "a", "policy": "red"}], default="x")},
            "spec.multiAgent.policyMapping.default",
        ),
        ({"multiAgent": _ma(policiesToTrain=["red", "blue"])}, "spec.multiAgent.policiesToTrain[1]"),
        (
            {"multiAgent": _ma(rules=[{"prefix": "a", "regex": "b", "policy": "red"}])},
            "spec.multiAgent.policyMapping.rules[0]",
        ),
        ({"multiAgent": _ma(rules=[{"regex": "(", "policy": "red"}])}, "spec.multiAgent.policyMapping.rules[0].regex"),
        ({"multiAgent": _ma(rules=[], entryPoint="a:b")}, "spec.multiAgent.policyMapping"),
        ({"multiAgent": _ma(entryPoint="a:b", default="red")}, "spec.multiAgent.policyMapping.default"),
        ({"multiAgent": _ma(policies={"re:d": {}})}, "spec.multiAgent.policies"),
        ({"multiAgent": _ma(policies={})}, "spec.multiAgent.policies"),
        ({"multiAgent": _ma(policies={"red": {"hidden": [0]}})}, "spec.multiAgent.policies.red.hidden"),
        ({"multiAgent": _ma(policies={"red": {"hiden": [4]}})}, "spec.multiAgent.policies.red.hiden"),
        ({"multiAgent": _ma(countStepsBy="agents")}, "spec.multiAgent.countStepsBy"),
        ({"policy": {"recurrent": {"cell": "rnn"}}}, "spec.policy.recurrent.cell"),
        ({"policy": {"recurrent": {"size": 0}}}, "spec.policy.recurrent.size"),
        ({"policy": {"recurrent": {"size": 100_000}}}, "spec.policy.recurrent.size"),
        ({"policy": {"recurrent": {"layers": 2}}}, "spec.policy.recurrent.layers"),
        ({"policy": {"recurrent": "lstm"}}, "spec.policy.recurrent"),
        ({"policy": {"recurrent": {}, "entryPoint": "a.b:C"}}, "spec.policy.recurrent"),
        (
            {"multiAgent": _ma(policies={"red": {"recurrent": {"cell": "LSTM"}}})},
            "spec.multiAgent.policies.red.recurrent.cell",
        ),
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
        "import sys, rolloutfleet, rolloutfleet.spec.job;"
        "rolloutfleet.RolloutJob.from_file('examples/cartpole.yaml');"
        "heavy = {'torch', 'gymnasium', 'redis'} & set(sys.modules);"
        "sys.exit(f'imported {heavy}' if heavy else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env": {"id": "CartPole-v1", "numEnvs": 4097}}, "spec.env.numEnvs"),
        ({"env": {"id": "CartPole-v1"}, "sampling": {"rolloutFragmentLength": 1_000_000_000}},
         "spec.sampling.rolloutFragmentLength"),
        ({"env": {"id": "CartPole-v1"}, "policy": {"hidden": [100000, 100000]}}, "spec.policy.hidden"),
        ({"env": {"id": "CartPole-v1"}, "policy": {"hidden": [8] * 65}}, "spec.policy.hidden"),
        ({"env": {"id": "CartPole-v1"}, "multiAgent": {"policies": {"a": {"hidden": [20000]}},
          "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]}}}, "spec.multiAgent.policies.a.hidden"),
        ({"env": {"id": "CartPole-v1"}, "resources": {"memory": "lots"}}, "spec.resources.memory"),
        ({"env": {"id": "CartPole-v1", "maxConsecutiveFailures": 0}}, "spec.env.maxConsecutiveFailures"),
        ({"env": {"id": "CartPole-v1", "callTimeoutSeconds": 0}}, "spec.env.callTimeoutSeconds"),
        ({"env": {"id": "CartPole-v1", "callTimeoutSeconds": -5}}, "spec.env.callTimeoutSeconds"),
        ({"env": {"id": "CartPole-v1", "callTimeoutSeconds": 86401}}, "spec.env.callTimeoutSeconds"),
    ],
)  # fmt: skip
def test_absurd_sizes_are_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": spec})
    assert str(refused.value).startswith(field + ":"), str(refused.value)


def test_kubernetes_quantities() -> None:
    from rolloutfleet.spec.job import parse_quantity

    assert parse_quantity("512Mi") == 512 * 2**20
    assert parse_quantity("2G") == 2e9
    assert parse_quantity("1500m") == 1.5
    assert parse_quantity("3e2") == 300
    for bad in ("lots", "1 Gi", "Gi", "1GB", "-1Gi"):
        with pytest.raises(ValueError, match="quantity"):
            parse_quantity(bad)


@pytest.mark.parametrize(
    ("policy", "override"),
    [
        ({"recurrent": {"cell": "lstm"}}, {"entryPoint": "pkg.mod:Model"}),
        ({"entryPoint": "pkg.mod:Model"}, {"recurrent": {"cell": "gru"}}),
    ],
    ids=["recurrent-base-custom-override", "custom-base-recurrent-override"],
)
def test_a_multiagent_policy_both_recurrent_and_custom_is_refused_naming_it(
    policy: dict[str, Any], override: dict[str, Any]
) -> None:
    """spec.policy's fields merged with a policy's overrides: recurrent wraps the default model only."""
    multi = {"policies": {"a": {}, "b": override}, "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]}}
    spec = {"env": {"entryPoint": "pkg.env:make"}, "policy": policy, "multiAgent": multi}
    with pytest.raises(SpecError) as refused:
        RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": spec})
    assert str(refused.value).startswith("spec.multiAgent.policies.b.recurrent: wraps the default model"), str(
        refused.value
    )


def test_env_calls_get_a_generous_timeout_by_default() -> None:
    job = RolloutJob.from_dict({"metadata": {"name": "x"}, "spec": {"env": {"id": "CartPole-v1"}}})
    assert job.spec.env.call_timeout_seconds == 300
    assert job.to_dict()["spec"]["env"]["callTimeoutSeconds"] == 300


def test_sampling_infos_keys_and_where_they_are_refused() -> None:
    job = RolloutJob.from_dict(manifest(sampling={"infos": ["lap_time", "pos"]}))
    assert job.spec.sampling.infos == ["lap_time", "pos"]
    assert RolloutJob.from_dict(manifest()).spec.sampling.infos == []
    for keys, what in ((["_x"], "not start with '_'"), (["a/b"], "no '/'"), (["a", "a"], "repeat")):
        with pytest.raises(SpecError, match=rf"spec\.sampling\.infos.*{what}"):
            RolloutJob.from_dict(manifest(sampling={"infos": keys}))
    with pytest.raises(
        SpecError, match=r"spec\.sampling\.infos: records single-agent env infos; leave it out with multiAgent"
    ):
        RolloutJob.from_dict(manifest(sampling={"infos": ["x"]}, multiAgent=_ma()))
    with pytest.raises(
        SpecError, match=r"spec\.sampling\.infos: needs the step infos, which env.vectorization 'async'"
    ):
        RolloutJob.from_dict(manifest(sampling={"infos": ["x"]}, env={"id": "CartPole-v1", "vectorization": "async"}))


def test_any_namespace_kubernetes_has_is_taken_and_a_name_leaves_room_for_its_pods() -> None:
    def job(name: str, namespace: str) -> RolloutJob:
        return RolloutJob.from_dict({"metadata": {"name": name, "namespace": namespace},
                                     "spec": {"env": {"id": "CartPole-v1"}}})  # fmt: skip

    assert job("cp", "n" * 63).namespace == "n" * 63  # Kubernetes allows 63; pods do not carry it
    with pytest.raises(SpecError, match=r"metadata\.namespace: must be a lowercase DNS label .* at most 63 characters"):
        job("cp", "n" * 64)
    assert job("c" * 50, "default").name == "c" * 50
    with pytest.raises(SpecError, match=r"metadata\.name: .* at most 50 characters"):  # <name>-worker-<i> <= 63
        job("c" * 51, "default")

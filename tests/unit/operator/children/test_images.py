"""Which worker image a job's pods run: the slim one exactly where its memory is a numpy worker's."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.images import image_kind, worker_image
from rolloutfleet_operator.children.pods import build_pod
from rolloutfleet_operator.config import DEFAULT_WORKER_IMAGE, DEFAULT_WORKER_SLIM_IMAGE, OperatorConfig

SLIM, FULL = DEFAULT_WORKER_SLIM_IMAGE, DEFAULT_WORKER_IMAGE


def job(**spec: Any) -> RolloutJob:
    body: dict[str, Any] = {"replicas": 2, "env": {"id": "CartPole-v1", "numEnvs": 8}}
    body.update(spec)
    return RolloutJob.from_dict({"metadata": {"name": "cp", "namespace": "team"}, "spec": body})


def two_policies(second: dict[str, Any]) -> dict[str, Any]:
    return {
        "multiAgent": {
            "policies": {"a": {}, "b": second},
            "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]},
        }
    }


def pong(**env: Any) -> dict[str, Any]:
    return {"env": {"id": "ALE/Pong-v5", "numEnvs": 2, **env}}


CASES = [
    ({}, "slim"),  # the default MLP on the CPU: numpy
    ({"policy": {"hidden": [64, 64], "activation": "relu", "device": "cpu"}}, "slim"),
    ({"policy": {"device": "auto"}}, "slim"),  # auto without a GPU is the CPU
    ({"policy": {"inference": "torch"}}, "full"),
    ({"policy": {"entryPoint": "mypkg.models:Net"}}, "full"),
    ({"policy": {"recurrent": {"cell": "lstm", "size": 32}}}, "full"),
    ({"policy": {"device": "cuda"}}, "full"),
    ({"resources": {"gpu": 1}}, "full"),  # device auto with a GPU acts on it
    ({"resources": {"gpu": 1}, "policy": {"device": "cpu"}}, "full"),  # a GPU pod: the CUDA image
    (two_policies({}), "slim"),
    (two_policies({"inference": "torch"}), "full"),  # any policy that needs torch
    (pong(), "full"),  # ALE frames: the CNN
    (pong(id="ALE/Pong-ram-v5"), "slim"),  # 128 bytes of RAM: the MLP, and ale-py is in the slim image
    (pong(config={"obs_type": "ram"}), "slim"),
    ({"env": {"id": "CarRacing-v3", "wrappers": [{"name": "ResizeObservation", "args": {"shape": [64, 64]}}]}}, "full"),
]


@pytest.mark.parametrize(("spec", "kind"), CASES)
def test_the_slim_image_exactly_where_every_policy_acts_in_numpy(spec: dict[str, Any], kind: str) -> None:
    config = OperatorConfig()
    the_job = job(**spec)
    assert image_kind(the_job, config) == kind
    pod = build_pod(the_job, "u", 0, config)
    container = pod["spec"]["containers"][0]
    assert container["image"] == (SLIM if kind == "slim" else FULL)
    # One rule: the memory default of a slim pod is the numpy worker's, of a full CPU pod torch's.
    if "gpu" not in spec.get("resources", {}):
        memory = container["resources"]["limits"]["memory"]
        assert memory == (config.worker_memory if kind == "slim" else config.worker_torch_memory)


def test_spec_image_wins_over_both() -> None:
    config = OperatorConfig()
    for spec in ({}, {"policy": {"inference": "torch"}}):
        the_job = job(image="registry.example/team/worker:7", **spec)
        assert (image_kind(the_job, config), worker_image(the_job, config)) == (
            "spec",
            "registry.example/team/worker:7",
        )


def test_without_a_slim_image_every_job_runs_the_full_one() -> None:
    config = OperatorConfig.from_environ(
        {"ROLLOUTFLEET_WORKER_SLIM_IMAGE": "none", "ROLLOUTFLEET_WORKER_IMAGE": "r/w:1"}
    )
    assert (image_kind(job(), config), worker_image(job(), config)) == ("full", "r/w:1")
    named = OperatorConfig.from_environ({"ROLLOUTFLEET_WORKER_SLIM_IMAGE": "r/w:1-small"})
    assert worker_image(job(), named) == "r/w:1-small"
    assert OperatorConfig.from_environ({}).worker_slim_image == SLIM == f"{FULL}-slim"

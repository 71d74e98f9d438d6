"""``spec.env.external``: where the spaces come from, and what an external env cannot have."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.external import ExternalSpec, local_port


def job(env: dict[str, Any], **spec: Any) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "ext"}, "spec": {"env": env, **spec}})


BOX = {"type": "Box", "shape": [4]}
TWO = {"type": "Discrete", "n": 2}


def test_defaults_and_spaces_from_the_id() -> None:
    external = job({"id": "CartPole-v1", "external": {}}).spec.env.external
    assert external is not None
    assert (external.port, external.max_clients, external.episode_timeout_seconds) == (9900, 64, 60.0)
    assert not external.declares_spaces


def test_declared_spaces_without_an_id() -> None:
    external = job({"external": {"observationSpace": BOX, "actionSpace": TWO}}).spec.env.external
    assert external is not None and external.declares_spaces


@pytest.mark.parametrize(
    ("env", "spec", "message"),
    [
        ({"external": {}}, {}, "spec.env.external: give the spaces once"),
        ({"id": "CartPole-v1", "external": {"observationSpace": BOX, "actionSpace": TWO}}, {}, "give the spaces once"),
        ({"entryPoint": "m:f", "external": {}}, {}, "spec.env.entryPoint: an external env runs outside the fleet"),
        ({"id": "CartPole-v1", "numEnvs": 4, "external": {}}, {}, "spec.env.external: wrappers and numEnvs"),
        ({"external": {"observationSpace": BOX}}, {}, "spec.env.external.actionSpace: declare both"),
        ({"external": {"observationSpace": {"type": "Box"}, "actionSpace": TWO}}, {}, "observationSpace.shape"),
        ({"external": {"observationSpace": {"type": "Discrete"}, "actionSpace": TWO}}, {}, "observationSpace.n"),
        (
            {"external": {"observationSpace": BOX, "actionSpace": {"type": "Box", "shape": [1], "low": 1, "high": 0}}},
            {},
            "actionSpace.low: must be below high",
        ),
        ({"id": "CartPole-v1", "external": {"port": 0}}, {}, "spec.env.external.port"),
        ({"id": "CartPole-v1", "external": {"maxClients": 0}}, {}, "spec.env.external.maxClients"),
        ({"id": "CartPole-v1", "external": {"episodeTimeoutSeconds": 0}}, {}, "episodeTimeoutSeconds"),
        ({"id": "CartPole-v1", "external": {"prot": 1}}, {}, "spec.env.external.prot: unknown field"),
        (
            {"id": "CartPole-v1", "external": {}},
            {"multiAgent": {"policies": {"a": {}}, "policyMapping": {"rules": [{"prefix": "", "policy": "a"}]}}},
            "spec.env.external: serves single-agent simulators",
        ),
    ],
)
def test_a_wrong_external_env_is_one_error_naming_the_field(
    env: dict[str, Any], spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        job(env, **spec)


def test_local_workers_listen_on_ports_of_their_own() -> None:
    assert [local_port(ExternalSpec(port=9000), i) for i in range(3)] == [9000, 9001, 9002]

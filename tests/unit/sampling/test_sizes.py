"""Sizes estimated up front agree with what the model and the codec really produce, and
what cannot work is refused naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet import EnvRunner, RolloutJob
from rolloutfleet.data.codec import encode
from rolloutfleet.fleet.runner_factory import build_model
from rolloutfleet.sampling.sizes import PAYLOAD_CAP_BYTES, check_sizes
from rolloutfleet.spec.job import SpecError


def job(**spec: Any) -> RolloutJob:
    base: dict[str, Any] = {"env": {"id": "CartPole-v1", "numEnvs": 4}, "sampling": {"rolloutFragmentLength": 50}}
    for key, value in spec.items():
        base[key] = {**base.get(key, {}), **value}
    return RolloutJob.from_dict({"metadata": {"name": "sizes"}, "spec": base})


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"policy": {"hidden": [256, 128, 64], "vfShareLayers": False}},
        {"env": {"id": "Pendulum-v1", "numEnvs": 3}, "sampling": {"observationFilter": "meanStd"}},
        {"env": {"id": "Blackjack-v1", "numEnvs": 3}},  # Tuple observations: one column per leaf
        {"policy": {"recurrent": {"cell": "lstm", "size": 32}, "stateOut": True}},
        {"policy": {"recurrent": {"cell": "gru", "size": 16}, "device": "cpu"}},
    ],
)
def test_the_estimate_matches_the_model_and_the_encoded_fragment(spec: dict[str, Any]) -> None:
    the_job = job(**spec)
    size = check_sizes(the_job)
    assert size is not None
    assert size.parameters == sum(p.numel() for p in build_model(the_job).parameters())
    batch = EnvRunner(the_job).sample()
    payload = len(encode(batch))
    assert size.rows == len(batch)
    assert abs(size.fragment_bytes - payload) / payload < 0.05, (size.fragment_bytes, payload)


def test_the_cap_is_the_publisher_s() -> None:
    from rolloutfleet.transport.publisher import DEFAULT_MAX_PAYLOAD_BYTES

    assert PAYLOAD_CAP_BYTES == DEFAULT_MAX_PAYLOAD_BYTES


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env": {"numEnvs": 64}, "sampling": {"rolloutFragmentLength": 20000}}, "spec.sampling.rolloutFragmentLength"),
        ({"policy": {"hidden": [16384, 16384]}}, "spec.policy.hidden"),
        ({"policy": {"hidden": [4096, 4096]}, "resources": {"memory": "64Mi"}}, "spec.resources.memory"),
        ({"env": {"id": None, "entryPoint": "tests.unit.sampling.sampler_test_envs:make_text_env"}}, "spec.env"),
        ({"env": {"id": "Blackjack-v1"}, "sampling": {"observationFilter": "meanStd"}},
         "spec.sampling.observationFilter"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as refused:
        check_sizes(job(**spec))
    assert str(refused.value).startswith(field + ":")
    assert "\n" not in str(refused.value)


def test_compression_allows_larger_fragments_up_to_a_bound() -> None:
    # About 130 MB uncompressed: too much without compression, within 4 x 32 MiB with zstd.
    big = {"env": {"numEnvs": 64}, "sampling": {"rolloutFragmentLength": 20000}}
    assert check_sizes(job(**big, redis={"compression": "zstd"})) is not None
    with pytest.raises(SpecError, match="rolloutFragmentLength"):
        check_sizes(job(env={"numEnvs": 256}, sampling={"rolloutFragmentLength": 20000}, redis={"compression": "zstd"}))

"""CPUs a worker may keep busy, read from the RolloutJob: on a pod and under ``rolloutfleet run``."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.rules.footprint import env_gives_images, job_needs_torch, local_cpus, pod_cpu, pod_cpus
from rolloutfleet.spec.job import RolloutJob


def job(replicas: int, env: dict[str, Any], resources: dict[str, str] | None = None) -> RolloutJob:
    spec: dict[str, Any] = {"replicas": replicas, "env": {"id": "CartPole-v1", **env}}
    if resources:
        spec["resources"] = resources
    return RolloutJob.from_dict({"metadata": {"name": "cpus"}, "spec": spec})


@pytest.mark.parametrize(
    ("replicas", "env", "resources", "machine", "expected"),
    [
        (4, {}, None, 16, 4),  # no request: an equal share of the machine per worker
        (3, {}, None, 8, 2),
        (8, {}, None, 2, 1),  # never below one
        (2, {"numEnvs": 8, "vectorization": "async"}, None, 16, 4),  # what the pod would request
        (2, {}, {"cpu": "1500m"}, 16, 2),  # resources.cpu, rounded up
        (1, {}, {"cpu": "8"}, 2, 2),  # never more than the machine has
    ],
)
def test_local_workers_share_the_machine_as_pods_share_a_node(
    replicas: int, env: dict[str, Any], resources: dict[str, str] | None, machine: int, expected: int
) -> None:
    assert local_cpus(job(replicas, env, resources), machine) == expected


def test_pods_request_what_the_job_sets_or_one_cpu_per_async_sub_env_up_to_four() -> None:
    assert (pod_cpu(job(1, {})), pod_cpus(job(1, {}))) == (None, 1)
    assert (
        pod_cpu(job(1, {"numEnvs": 2, "vectorization": "async"})),
        pod_cpus(job(1, {"numEnvs": 2, "vectorization": "async"})),
    ) == ("2", 2)
    assert pod_cpus(job(1, {}, {"cpu": "2500m"})) == 3


@pytest.mark.parametrize(
    ("env", "images"),
    [
        ({"id": "ALE/Pong-v5"}, True),  # RGB frames: the default CNN, hence torch
        ({"id": "ALE/Pong-v5", "config": {"obs_type": "grayscale"}}, True),
        ({"id": "ALE/Pong-ram-v5"}, False),  # 128 bytes of RAM: the MLP
        ({"id": "ALE/Pong-v5", "config": {"obs_type": "ram"}}, False),
        ({"id": "CartPole-v1"}, False),
        ({"id": "CarRacing-v3", "wrappers": [{"name": "GrayscaleObservation"}]}, True),
        ({"id": "CartPole-v1", "wrappers": [{"name": "FrameStackObservation", "args": {"stack_size": 4}}]}, False),
    ],
)
def test_image_observations_that_the_spec_shows_count_as_torch(env: dict[str, Any], images: bool) -> None:
    the_job = RolloutJob.from_dict({"metadata": {"name": "img"}, "spec": {"env": env}})
    assert env_gives_images(the_job.spec.env) is images
    assert job_needs_torch(the_job) is images  # the default policy needs torch only for images

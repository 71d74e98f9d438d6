"""``vectorization: async`` runs one process per sub-env: numEnvs must fit the pod's CPUs."""

from __future__ import annotations

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError


def job(num_envs: int, vectorization: str = "async", cpu: str | None = None) -> RolloutJob:
    spec: dict[str, object] = {"env": {"id": "CartPole-v1", "numEnvs": num_envs, "vectorization": vectorization}}
    if cpu is not None:
        spec["resources"] = {"cpu": cpu}
    return RolloutJob.from_dict({"metadata": {"name": "a"}, "spec": spec})


def test_async_sub_envs_up_to_two_per_cpu_are_accepted() -> None:
    assert job(8, cpu="4").spec.env.num_envs == 8
    assert job(2, cpu="500m").spec.env.num_envs == 2  # a fraction of a CPU counts as one
    assert job(64).spec.env.num_envs == 64


@pytest.mark.parametrize(
    ("num_envs", "cpu", "limit"), [(9, "4", "so 8"), (3, "500m", "so 2"), (65, None, "at most 64 without")]
)
def test_more_async_processes_than_the_cpus_run_is_one_line_naming_num_envs(
    num_envs: int, cpu: str | None, limit: str
) -> None:
    with pytest.raises(
        SpecError, match=rf"^spec\.env\.numEnvs: {num_envs} with vectorization 'async' .*{limit}"
    ) as err:
        job(num_envs, cpu=cpu)
    assert "\n" not in str(err.value)


def test_the_limit_is_for_async_only_and_a_bad_cpu_quantity_is_named() -> None:
    assert job(1024, vectorization="sync", cpu="1").spec.env.num_envs == 1024
    with pytest.raises(SpecError, match=r"^spec\.resources\.cpu: "):
        job(2, cpu="lots")

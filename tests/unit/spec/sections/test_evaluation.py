"""spec.evaluation: defaults, bounds, and the jobs it cannot judge (one line naming the field)."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.evaluation import DEFAULT_EVALUATION_SEED, EvaluationSpec


def job(**spec: Any) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1"}, **spec}})


def test_defaults_and_camel_case_fields() -> None:
    evaluation = job(evaluation={"envConfig": {"a": 1}, "maxEpisodeSteps": 9}).spec.evaluation
    assert evaluation == EvaluationSpec(workers=1, episodes=10, explore=False, seed=DEFAULT_EVALUATION_SEED,
                                        env_config={"a": 1}, max_episode_steps=9)  # fmt: skip
    assert job().spec.evaluation is None


@pytest.mark.parametrize(("field", "value"), [("episodes", 0), ("workers", 65), ("seed", -1), ("maxEpisodeSteps", 0)])
def test_out_of_bounds_values_name_the_field(field: str, value: int) -> None:
    with pytest.raises(SpecError, match=rf"spec\.evaluation\.{field}"):
        job(evaluation={field: value})


def test_multi_agent_and_external_jobs_are_refused() -> None:
    mapping = {"rules": [{"prefix": "x", "policy": "a"}]}
    with pytest.raises(SpecError, match=r"spec\.evaluation: .*multiAgent"):
        RolloutJob.from_dict({"metadata": {"name": "t"}, "spec": {
            "env": {"entryPoint": "pkg.mod:make"}, "evaluation": {},
            "multiAgent": {"policies": {"a": {}}, "policyMapping": mapping}}})  # fmt: skip
    with pytest.raises(SpecError, match=r"spec\.evaluation: .*env\.external"):
        job(env={"id": "CartPole-v1", "external": {}}, evaluation={})

"""policy.exploration in the spec: what validates, with which one-line message, and the
schedules' and Ape-X spread's values."""

from __future__ import annotations

from typing import Any

import pytest

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.sections.exploration_spec import (
    ExplorationSpec,
    PerWorkerEpsilonSpec,
    ScheduleSpec,
    per_worker_epsilon,
    schedule_value,
)


def manifest(exploration: Any, multi: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"env": {"id": "CartPole-v1"}, "policy": {"exploration": exploration}}
    if multi:
        spec["policy"] = {}
        spec["multiAgent"] = {
            "policies": {"red": {"exploration": exploration}, "blue": {}},
            "policyMapping": {"rules": [{"prefix": "r", "policy": "red"}], "default": "blue"},
        }
    return {"metadata": {"name": "x"}, "spec": spec}


def test_the_simplest_form_is_a_constant_epsilon() -> None:
    job = RolloutJob.from_dict(manifest({"type": "epsilonGreedy", "epsilon": 0.1}))
    exploration = job.spec.policy.exploration
    assert (exploration.type, exploration.constant_scale, exploration.follows_global_step) == (
        "epsilonGreedy",
        0.1,
        False,
    )
    assert RolloutJob.from_dict(manifest({})).spec.policy.exploration.type == "stochastic"  # the default
    assert (
        RolloutJob.from_dict(
            {"metadata": {"name": "x"}, "spec": {"env": {"id": "CartPole-v1"}}}
        ).spec.policy.exploration
        == ExplorationSpec()
    )


def test_a_multi_agent_policy_overrides_exploration() -> None:
    job = RolloutJob.from_dict(manifest({"type": "epsilonGreedy", "epsilon": 0.2}, multi=True))
    assert job.spec.multi_agent is not None
    policies = job.spec.multi_agent.policies
    assert policies["red"].apply(job.spec.policy).exploration.epsilon == 0.2
    assert policies["blue"].apply(job.spec.policy).exploration.type == "stochastic"


@pytest.mark.parametrize(
    ("exploration", "message"),
    [
        ({"type": "epsilonGreedy", "epsilon": 1.5}, "spec.policy.exploration.epsilon: ε must be within [0, 1], got 1.5"),
        ({"type": "epsilonGreedy", "epsilon": -0.1}, "spec.policy.exploration.epsilon: ε must be within [0, 1], got -0.1"),
        ({"type": "epsilonGreedy"}, "spec.policy.exploration.epsilon: epsilonGreedy needs 'epsilon'"),
        ({"type": "epsilonGreedy", "schedule": {"initial": 1.2, "final": 0.1, "steps": 10}},
         "spec.policy.exploration.schedule.initial: ε must be within [0, 1], got 1.2"),
        ({"type": "epsilonGreedy", "epsilon": 0.1, "perWorker": {}},
         "spec.policy.exploration.perWorker: give one of epsilon and perWorker, not both"),
        ({"type": "epsilonGreedy", "perWorker": {"base": 2}}, "spec.policy.exploration.perWorker.base: "),
        ({"type": "gaussian", "epsilon": 0.1}, "spec.policy.exploration.epsilon: does not apply to type 'gaussian'"),
        ({"type": "epsilonGreedy", "sigma": 0.1}, "spec.policy.exploration.sigma: does not apply to type 'epsilonGreedy'"),
        ({"type": "gaussian", "theta": 0.1}, "spec.policy.exploration.theta: does not apply to type 'gaussian'"),
        ({"type": "stochastic", "epsilon": 0.1}, "spec.policy.exploration.epsilon: does not apply to type 'stochastic'"),
        ({"type": "gaussian", "sigma": -1}, "spec.policy.exploration.sigma: "),
        ({"type": "gaussian", "schedule": {"type": "exponential", "initial": 0, "final": 0.1, "steps": 10}},
         "spec.policy.exploration.schedule.initial: an exponential schedule needs a value above 0"),
        ({"type": "gaussian", "schedule": {"initial": 1, "final": 0.1, "steps": 0}}, "spec.policy.exploration.schedule.steps: "),
        ({"type": "boltzmann"}, "spec.policy.exploration.type: must be one of 'stochastic', 'epsilonGreedy'"),
    ],
)  # fmt: skip
def test_bad_exploration_is_one_line_naming_the_field(exploration: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        RolloutJob.from_dict(manifest(exploration))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_multi_agent_override_error_names_the_policy() -> None:
    with pytest.raises(SpecError, match=r"^spec\.multiAgent\.policies\.red\.exploration\.epsilon: ε must be"):
        RolloutJob.from_dict(manifest({"type": "epsilonGreedy", "epsilon": 3}, multi=True))


def test_linear_and_exponential_schedules_reach_final_at_steps_and_stay() -> None:
    linear = ScheduleSpec(type="linear", initial=1.0, final=0.1, steps=1000)
    assert [schedule_value(linear, s) for s in (-5, 0, 250, 1000, 5000)] == pytest.approx([1.0, 1.0, 0.775, 0.1, 0.1])
    exponential = ScheduleSpec(type="exponential", initial=1.0, final=0.001, steps=300)
    assert [schedule_value(exponential, s) for s in (0, 100, 200, 300, 10**6)] == pytest.approx(
        [1.0, 0.1, 0.01, 0.001, 0.001]
    )


def test_ape_x_spread_gives_worker_i_of_n_base_to_the_1_plus_alpha_i_over_n_minus_1() -> None:
    spread = PerWorkerEpsilonSpec()  # RLlib / Ape-X defaults
    assert (spread.base, spread.alpha) == (0.4, 7.0)
    assert [per_worker_epsilon(spread, i, 8) for i in range(8)] == pytest.approx([0.4 ** (1 + i) for i in range(8)])
    assert per_worker_epsilon(spread, 0, 1) == 0.4  # one worker: no spread, no division by zero
    assert per_worker_epsilon(PerWorkerEpsilonSpec(base=0.5, alpha=3), 2, 3) == pytest.approx(0.5**4)

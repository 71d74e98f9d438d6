"""The default recurrent model: its one-step forward (what workers act with) and its
sequence unroll (what a learner trains with) compute the same thing; the policy wraps it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rolloutfleet.inference.distributions import distribution_for
from rolloutfleet.inference.policy import Policy
from rolloutfleet.inference.recurrent_model import RecurrentModel, is_stateful
from rolloutfleet.spec.job import PolicySpec, RecurrentSpec


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.Box(-1, 1, (2,))], ids=["discrete", "box"])
def test_stepping_one_row_at_a_time_equals_unrolling_the_sequence(cell: str, action_space: spaces.Space) -> None:  # type: ignore[type-arg]
    torch.manual_seed(0)
    model = RecurrentModel(spaces.Box(-5, 5, (3,)), action_space, distribution_for(action_space), cell, 16, [8])
    obs = torch.randn(4, 7, 3)  # 4 sequences of 7 steps
    start = [torch.randn(4, 16) for _ in model.initial_state()]
    with torch.no_grad():
        out, values, end = model.unroll(obs, start)
        state = start
        for step in range(7):
            step_out, step_values, state = model(obs[:, step], state)
            torch.testing.assert_close(step_out, out[:, step], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(step_values, values[:, step], atol=1e-5, rtol=1e-5)
    for mine, theirs in zip(state, end, strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    assert len(end) == (2 if cell == "lstm" else 1)
    # The state matters: another start state gives other outputs.
    with torch.no_grad():
        other, _, _ = model.unroll(obs, [torch.zeros_like(part) for part in start])
    assert not torch.allclose(other[:, 0], out[:, 0], atol=1e-4)


def test_the_policy_acts_in_torch_with_a_per_row_state() -> None:
    spec = PolicySpec(hidden=[8], device="cpu", recurrent=RecurrentSpec(cell="gru", size=5))
    policy = Policy(spec, spaces.Box(-1, 1, (4,)), spaces.Discrete(2), seed=0, init_seed=1)
    assert policy.recurrent and policy.inference == "torch"
    assert is_stateful(policy.torch_model())
    state = policy.initial_state(3)
    assert [part.shape for part in state] == [(3, 5)] and not state[0].any()
    obs = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    actions, _, dist_inputs, _, new_state = policy.act_recurrent(explore=False)(obs, state)
    assert actions.shape == (3,) and new_state[0].shape == (3, 5) and new_state[0].any()
    np.testing.assert_array_equal(actions, dist_inputs.argmax(axis=1))
    with pytest.raises(TypeError, match="act_recurrent"):
        policy.compute_actions(obs, explore=True)


def test_the_same_init_seed_gives_every_worker_the_same_recurrent_weights() -> None:
    spec = PolicySpec(hidden=[8], device="cpu", recurrent=RecurrentSpec(size=4))
    a, b = (Policy(spec, spaces.Box(-1, 1, (4,)), spaces.Discrete(2), init_seed=7) for _ in range(2))
    for name, value in a.get_weights().items():
        np.testing.assert_array_equal(value, b.get_weights()[name])

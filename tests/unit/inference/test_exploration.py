"""Exploration draws checked against their definitions: frequencies of thousands of actions
against ε (tolerances from the binomial), noise moments against σ (from the chi-square),
and Ornstein-Uhlenbeck noise replayed from the actions it produced."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gymnasium import spaces

from rolloutfleet.inference.exploration import EpsilonGreedy, GaussianNoise, OrnsteinUhlenbeckNoise, make_exploration
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, SpecError
from rolloutfleet.spec.sections.exploration_spec import ExplorationSpec, ScheduleSpec

ROWS = 40_000


def within_binomial(count: int, rows: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - rows * p) <= sigmas * math.sqrt(rows * p * (1 - p))


def within_chi_square(sample_var: float, var: float, rows: int, sigmas: float = 5.0) -> bool:
    """A sample variance of ``rows`` normal draws has relative standard deviation sqrt(2 / rows)."""
    return abs(sample_var / var - 1) <= sigmas * math.sqrt(2 / rows)


def epsilon_greedy(epsilon: float, n: int = 4, start: int = 0) -> EpsilonGreedy:
    explorer = make_exploration(ExplorationSpec(type="epsilonGreedy", epsilon=epsilon), spaces.Discrete(n, start=start))
    assert isinstance(explorer, EpsilonGreedy)
    return explorer


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.3, 1.0])
def test_epsilon_greedy_takes_a_uniform_action_with_probability_epsilon(epsilon: float) -> None:
    # The softmax of these logits puts 0.98 on action 2: sampling it would not pass for ε-greedy.
    logits = np.tile(np.array([0.0, 0.0, 5.0, 0.0], np.float32), (ROWS, 1))
    actions, logp = epsilon_greedy(epsilon).sample(logits, np.random.default_rng(0))
    counts = np.bincount(actions, minlength=4)
    for action in range(4):
        p = epsilon / 4 + (1 - epsilon) * (action == 2)
        assert within_binomial(int(counts[action]), ROWS, p), (action, counts)
        # logp is the behaviour policy's: log(ε/n + (1−ε)·[greedy])
        if counts[action]:
            assert np.allclose(logp[actions == action], math.log(p), atol=1e-6)


def test_epsilon_greedy_never_draws_masked_actions_and_its_logp_counts_only_the_allowed() -> None:
    logits = np.tile(np.array([-np.inf, 1.0, 2.0, -np.inf, 0.5], np.float32), (ROWS, 1))
    actions, logp = epsilon_greedy(0.6, n=5).sample(logits, np.random.default_rng(1))
    counts = np.bincount(actions, minlength=5)
    assert counts[0] == counts[3] == 0
    assert within_binomial(int(counts[1]), ROWS, 0.6 / 3) and within_binomial(int(counts[2]), ROWS, 0.4 + 0.6 / 3)
    assert np.allclose(logp[actions == 1], math.log(0.2)) and np.allclose(logp[actions == 2], math.log(0.6))


def test_epsilon_greedy_honours_the_space_start() -> None:
    actions, _ = epsilon_greedy(0.0, n=3, start=-1).sample(
        np.array([[0.0, 3.0, 1.0]], np.float32), np.random.default_rng(0)
    )
    assert actions.tolist() == [0]  # index 1 of {-1, 0, 1}


def test_gaussian_noise_has_sigma_half_widths_and_is_clipped_to_the_space() -> None:
    space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 10.0], np.float32))
    explorer = make_exploration(ExplorationSpec(type="gaussian", sigma=0.1), space)
    assert isinstance(explorer, GaussianNoise)
    mean = np.tile(np.array([0.5, 5.0], np.float32), (ROWS, 1))
    inputs = np.concatenate([mean, np.full_like(mean, 3.0)], axis=1)  # the model's log_std is not used
    actions, logp = explorer.sample(inputs, np.random.default_rng(2))
    noise = actions - mean
    for dim, half_width in enumerate((2.0, 5.0)):
        assert within_chi_square(float(noise[:, dim].var()), (0.1 * half_width) ** 2, ROWS)
        assert abs(float(noise[:, dim].mean())) < 5 * 0.1 * half_width / math.sqrt(ROWS)
    z = noise / np.array([0.2, 0.5])
    assert np.allclose(logp, (-0.5 * z * z - np.log([0.2, 0.5]) - 0.5 * math.log(2 * math.pi)).sum(axis=1), atol=1e-4)
    # Far from the centre, the action is clipped to the bounds.
    edge = np.tile(np.array([2.0, 10.0, 0.0, 0.0], np.float32), (ROWS, 1))
    clipped, _ = explorer.sample(edge, np.random.default_rng(3))
    assert clipped[:, 0].max() == 2.0 and clipped[:, 1].max() == 10.0 and (clipped[:, 0] < 2.0).mean() > 0.4


def test_zero_sigma_acts_with_the_mean() -> None:
    explorer = make_exploration(ExplorationSpec(type="gaussian", sigma=0.0), spaces.Box(-1, 1, (3,), np.float32))
    assert explorer is not None
    inputs = np.random.default_rng(0).uniform(-0.5, 0.5, (10, 6)).astype(np.float32)
    actions, logp = explorer.sample(inputs, np.random.default_rng(0))
    assert np.array_equal(actions, inputs[:, :3]) and not logp.any()


def test_ornstein_uhlenbeck_noise_replays_as_its_recursion_and_restarts_per_slot() -> None:
    space = spaces.Box(-np.inf, np.inf, (1,), np.float32)  # unbounded: half-width 1, nothing clipped
    sigma, theta, envs, steps = 0.3, 0.2, 400, 30
    explorer = make_exploration(ExplorationSpec(type="ornsteinUhlenbeck", sigma=sigma, theta=theta), space)
    assert isinstance(explorer, OrnsteinUhlenbeckNoise)
    rng = np.random.default_rng(4)
    xs = np.empty((steps, envs))
    for s in range(steps):
        if s == 15:
            explorer.reset(np.arange(envs) % 2 == 0)  # even sub-envs start a new episode
        actions, _ = explorer.sample(np.zeros((envs, 2), np.float32), rng)
        xs[s] = actions[:, 0]
    residual = xs[1:] - (1 - theta) * xs[:-1]
    # x_0 = σ·n and x_t − (1−θ)·x_{t−1} = σ·n: all N(0, σ²), except where a slot restarted.
    restarted = np.zeros_like(residual, bool)
    restarted[14, ::2] = True
    innovations = np.concatenate([xs[0], residual[~restarted]])
    assert within_chi_square(float(innovations.var()), sigma**2, len(innovations))
    assert within_chi_square(float(xs[15, ::2].var()), sigma**2, envs // 2)  # fresh: no memory of x_14
    # Without the restart the odd slots carry on: their x_15 has the stationary variance's share.
    stationary = sigma**2 / (1 - (1 - theta) ** 2)
    assert float(xs[15, 1::2].var()) > 2 * sigma**2 and within_chi_square(float(xs[-1].var()), stationary, envs, 6.0)


def test_ornstein_uhlenbeck_bound_keys_keep_their_own_state() -> None:
    space = spaces.Box(-np.inf, np.inf, (1,), np.float32)
    explorer = make_exploration(ExplorationSpec(type="ornsteinUhlenbeck", sigma=1.0, theta=0.5), space)
    assert isinstance(explorer, OrnsteinUhlenbeckNoise)
    rng = np.random.default_rng(5)
    explorer.bind([(0, "a"), (0, "b")], [True, True])
    first, _ = explorer.sample(np.zeros((2, 2), np.float32), rng)
    explorer.bind([(0, "b")], [False])  # "a" does not act this step: its state waits
    second, _ = explorer.sample(np.zeros((1, 2), np.float32), rng)
    assert np.allclose(explorer.state[:2, 0], [first[0, 0], second[0, 0]])
    explorer.bind([(0, "a"), (1, "a")], [True, True])  # a new episode of "a" in sub-env 0, and a new key
    assert not explorer.state[[0, 2]].any() and explorer.state[1, 0] == second[0, 0]


def test_scheduled_scale_follows_the_global_step() -> None:
    schedule = ScheduleSpec(type="linear", initial=1.0, final=0.0, steps=100)
    explorer = epsilon_greedy(0.5)
    assert explorer.scale == 0.5
    explorer.set_global_step(10**6)  # a constant ε ignores it
    assert explorer.scale == 0.5
    scheduled = make_exploration(ExplorationSpec(type="epsilonGreedy", schedule=schedule), spaces.Discrete(2))
    assert scheduled is not None and scheduled.scale == 1.0
    scheduled.set_global_step(25)
    assert scheduled.scale == 0.75


def test_a_policy_explores_only_when_told_and_refuses_a_space_that_does_not_fit() -> None:
    spec = PolicySpec(exploration=ExplorationSpec(type="epsilonGreedy", epsilon=1.0), hidden=[8])
    policy = Policy(spec, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(5), seed=0)
    obs = np.random.default_rng(0).uniform(-1, 1, (ROWS, 3)).astype(np.float32)
    explored = policy.compute_actions(obs, explore=True)
    assert within_binomial(int((explored.actions == explored.dist_inputs.argmax(axis=1)).sum()), ROWS, 0.2)
    greedy = policy.act(explore=False)(obs)
    assert np.array_equal(greedy[0], greedy[2].argmax(axis=1))  # explore: false stays greedy
    assert (policy.exploration_scale(True), policy.exploration_scale(False)) == (1.0, 0.0)
    assert Policy(PolicySpec(), spaces.Box(-1, 1, (3,)), spaces.Discrete(2)).exploration_scale(True) is None
    with pytest.raises(
        SpecError, match=r"^spec\.policy\.exploration\.type: epsilonGreedy needs a Discrete action space"
    ):
        Policy(spec, spaces.Box(-1, 1, (3,)), spaces.Box(-1, 1, (2,)))
    noisy = PolicySpec(exploration=ExplorationSpec(type="ornsteinUhlenbeck"))
    with pytest.raises(SpecError, match=r"^spec\.policy\.exploration\.type: ornsteinUhlenbeck noise needs a float Box"):
        Policy(noisy, spaces.Box(-1, 1, (3,)), spaces.Discrete(2))


def test_per_worker_epsilon_comes_from_the_worker_index() -> None:
    spec = PolicySpec(exploration=ExplorationSpec.model_validate({"type": "epsilonGreedy", "perWorker": {}}))
    scales = [
        Policy(spec, spaces.Box(-1, 1, (3,)), spaces.Discrete(2), worker=(i, 4)).exploration_scale(True)
        for i in range(4)
    ]
    assert scales == pytest.approx([0.4 ** (1 + 7 * i / 3) for i in range(4)])


@pytest.mark.parametrize("epsilon", [1.0, 0.0])
def test_epsilon_greedy_under_an_action_mask_never_picks_an_illegal_action(epsilon: float) -> None:
    spec = PolicySpec(exploration=ExplorationSpec(type="epsilonGreedy", epsilon=epsilon), hidden=[8])
    policy = Policy(spec, spaces.Box(-1, 1, (3,), np.float32), spaces.Discrete(5), seed=0)
    obs = np.random.default_rng(1).uniform(-1, 1, (ROWS, 3)).astype(np.float32)
    mask = np.zeros((ROWS, 5), np.bool_)
    mask[:, [1, 3]] = True
    actions, _, dist_inputs, _ = policy.act(explore=True)(obs, mask)
    assert set(np.unique(actions).tolist()) <= {1, 3}
    if epsilon == 1.0:  # uniform over the two legal actions
        assert within_binomial(int((actions == 1).sum()), ROWS, 0.5)
    else:  # greedy among the legal ones; dist_inputs stay the model's unmasked logits
        legal = np.where(mask, dist_inputs, -np.inf)
        assert np.array_equal(actions, legal.argmax(axis=1))

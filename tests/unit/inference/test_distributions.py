"""Our numpy action distributions against torch.distributions (an independent implementation)."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from rolloutfleet.inference.distributions import Categorical, DiagGaussian, MultiCategorical, distribution_for


def test_categorical_logp_and_frequencies() -> None:
    rng = np.random.default_rng(0)
    logits = np.tile(np.array([[0.0, 1.0, -1.0, 2.0]], np.float32), (200_000, 1))
    actions, logp = Categorical(4).sample(logits, rng, explore=True)
    reference = torch.distributions.Categorical(logits=torch.from_numpy(logits[:1]))
    np.testing.assert_allclose(np.bincount(actions, minlength=4) / len(actions), reference.probs[0].numpy(), atol=0.005)
    np.testing.assert_allclose(logp, reference.log_prob(torch.from_numpy(actions)).numpy(), rtol=1e-5)
    greedy, _ = Categorical(4).sample(logits[:3], rng, explore=False)
    assert greedy.tolist() == [3, 3, 3]


def test_discrete_start_offset() -> None:
    dist = distribution_for(spaces.Discrete(3, start=5))
    actions, _ = dist.sample(np.zeros((100, 3), np.float32), np.random.default_rng(0), explore=True)
    assert set(actions.tolist()) <= {5, 6, 7}


def test_multi_categorical_matches_independent_components() -> None:
    rng = np.random.default_rng(1)
    inputs = rng.normal(size=(50, 5)).astype(np.float32)
    dist = MultiCategorical((2, 3))
    actions, logp = dist.sample(inputs, rng, explore=True)
    expected = torch.distributions.Categorical(logits=torch.from_numpy(inputs[:, :2])).log_prob(
        torch.from_numpy(actions[:, 0])
    )
    expected += torch.distributions.Categorical(logits=torch.from_numpy(inputs[:, 2:])).log_prob(
        torch.from_numpy(actions[:, 1])
    )
    np.testing.assert_allclose(logp, expected.numpy(), rtol=1e-5)


def test_diag_gaussian_logp_and_moments() -> None:
    rng = np.random.default_rng(2)
    mean, log_std = np.array([1.0, -2.0], np.float32), np.array([0.0, -1.0], np.float32)
    inputs = np.tile(np.r_[mean, log_std], (100_000, 1)).astype(np.float32)
    dist = DiagGaussian((2,), np.array([-1, -1]), np.array([1, 1]))
    actions, logp = dist.sample(inputs, rng, explore=True)
    np.testing.assert_allclose(actions.mean(axis=0), mean, atol=0.02)
    np.testing.assert_allclose(actions.std(axis=0), np.exp(log_std), atol=0.02)
    normal = torch.distributions.Normal(torch.from_numpy(mean), torch.from_numpy(np.exp(log_std)))
    np.testing.assert_allclose(logp[:100], normal.log_prob(torch.from_numpy(actions[:100])).sum(-1).numpy(), rtol=1e-4)
    np.testing.assert_allclose(dist.logp(inputs[:100], actions[:100]), logp[:100], rtol=1e-4)


def test_categorical_without_the_max_shift_samples_the_same_distribution() -> None:
    # Logits known to be small (a tanh head) skip the max-shift: same draws, same logp.
    logits = np.random.default_rng(3).uniform(-5, 5, (1000, 6)).astype(np.float32)
    shifted = Categorical(6).sample(logits, np.random.default_rng(4), explore=True)
    bounded = Categorical(6).sample(logits, np.random.default_rng(4), explore=True, bounded=True)
    np.testing.assert_array_equal(bounded[0], shifted[0])
    reference = torch.distributions.Categorical(logits=torch.from_numpy(logits)).log_prob(torch.from_numpy(bounded[0]))
    np.testing.assert_allclose(bounded[1], reference.numpy(), rtol=1e-5, atol=1e-6)


def test_categorical_with_extreme_logits_never_picks_a_zero_probability_action() -> None:
    logits = np.tile(np.array([[0.0, -500.0, 400.0]], np.float32), (10_000, 1))
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        actions, logp = Categorical(3).sample(logits, np.random.default_rng(0), explore=True)
    assert (actions == 2).all()
    np.testing.assert_allclose(logp, 0.0, atol=1e-6)


def test_masked_actions_are_never_drawn() -> None:
    # -inf logits (an action mask in a custom model): never drawn, the others uniform.
    logits = np.tile(np.array([[-np.inf, 0.0, 0.0, -np.inf]], np.float32), (2_000_000, 1))
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        actions, logp = Categorical(4).sample(logits, np.random.default_rng(5), explore=True)
    assert set(np.unique(actions).tolist()) == {1, 2}
    np.testing.assert_allclose(logp, np.log(0.5), rtol=1e-6)


def test_tiny_probabilities_stay_tiny() -> None:
    # float32 exponential noise is exactly 0 about once in 1e7 draws, and a zero wins the
    # race whatever the weight: with float64 noise an action of probability ~1e-26 never shows.
    logits = np.tile(np.array([[30.0, -30.0]], np.float32), (20_000_000, 1))
    actions, _ = Categorical(2).sample(logits, np.random.default_rng(6), explore=True, bounded=True)
    assert not actions.any()


# -- action masks ------------------------------------------------------------------------


def test_masked_sampling_never_draws_a_masked_action_even_the_best_one() -> None:
    rng = np.random.default_rng(0)
    logits = np.tile(np.array([[9.0, 0.0, 1.0, -2.0, 8.0]], np.float32), (2000, 1))
    mask = np.tile(np.array([[0, 1, 1, 1, 0]], np.int8), (2000, 1))
    dist = Categorical(5)
    drawn, logp = dist.sample_masked(logits, mask, rng, explore=True)
    assert set(np.unique(drawn)) <= {1, 2, 3} and len(np.unique(drawn)) == 3
    legal = np.array([0.0, 1.0, -2.0])
    expected = legal - np.log(np.exp(legal).sum())  # log-softmax over the legal actions only
    np.testing.assert_allclose(logp, expected[drawn - 1], rtol=1e-5)
    greedy, greedy_logp = dist.sample_masked(logits[:3], mask[:3], rng, explore=False)
    assert greedy.tolist() == [2, 2, 2]  # the best legal action, not the best one
    np.testing.assert_allclose(greedy_logp, expected[1], rtol=1e-5)


def test_masked_sampling_holds_when_the_noise_draws_exactly_zero() -> None:
    class ZeroNoise:
        def standard_exponential(self, shape: tuple[int, ...]) -> np.ndarray:
            return np.zeros(shape)

    logits = np.zeros((4, 3), np.float32)
    mask = np.array([[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 1, 1]], np.bool_)
    drawn, _ = Categorical(3, start=1).sample_masked(logits, mask, ZeroNoise(), explore=True)  # type: ignore[arg-type]
    assert mask[np.arange(4), drawn - 1].all()


# -- two actions: one logistic draw per row (Categorical._sample_two) ----------------------

# Chi-square's 0.999 quantile with 8 degrees of freedom (one per row of logits below).
CHI2_8_DF_999 = 26.12


def test_two_action_draws_match_the_exact_probabilities_chi_square() -> None:
    # Eight rows of logits (log-odds from -6 to 8, shifted arbitrarily), 250 000 draws each:
    # the count of action 1 per row against sigmoid(logit_1 - logit_0) computed in float64.
    pairs = np.array(
        [[3.0, -3.0], [1.0, -1.0], [0.25, -0.25], [5.0, 5.0], [-0.1, 0.2], [0.0, 1.0], [-4.0, -1.0], [-10.0, -2.0]],
        np.float32,
    )
    draws = 250_000
    logits = np.repeat(pairs, draws, axis=0)
    actions, logp = Categorical(2).sample(logits, np.random.default_rng(7), explore=True, bounded=True)
    p1 = 1.0 / (1.0 + np.exp(-(pairs[:, 1].astype(np.float64) - pairs[:, 0])))
    ones = actions.reshape(len(pairs), draws).sum(axis=1)
    expected = np.stack([draws * (1 - p1), draws * p1])
    observed = np.stack([draws - ones, ones])
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_8_DF_999, (chi2, ones / draws, p1)
    exact = torch.log_softmax(torch.from_numpy(logits), dim=-1).gather(1, torch.from_numpy(actions)[:, None])[:, 0]
    np.testing.assert_allclose(logp, exact.numpy(), rtol=1e-5, atol=1e-6)


def test_two_action_draws_are_not_mirrored() -> None:
    # A sampler that drew sigmoid(-d) would pass a symmetric test: here p(1) = 0.982.
    logits = np.tile(np.array([[0.0, 4.0]], np.float32), (100_000, 1))
    actions, _ = Categorical(2).sample(logits, np.random.default_rng(8), explore=True)
    assert abs(actions.mean() - 1 / (1 + np.exp(-4.0))) < 0.003


def test_two_actions_with_infinite_logits_greedy_ties_and_start() -> None:
    logits = np.array([[-np.inf, 0.0], [0.0, -np.inf], [2.0, 2.0], [1.0, 1.5]], np.float32)
    with np.errstate(over="raise", divide="raise", invalid="raise"):
        drawn, logp = Categorical(2, start=3).sample(
            np.repeat(logits[:2], 1000, axis=0), np.random.default_rng(9), True
        )
    assert drawn.tolist() == [4] * 1000 + [3] * 1000
    np.testing.assert_array_equal(logp, 0.0)
    greedy, greedy_logp = Categorical(2).sample(logits, np.random.default_rng(9), explore=False)
    assert greedy.tolist() == [1, 0, 0, 1]  # ties go to action 0, as argmax's do
    np.testing.assert_allclose(greedy_logp[2:], [np.log(0.5), -np.log1p(np.exp(-0.5))], rtol=1e-6)
    assert logp.dtype == np.float32 and drawn.dtype == np.int64

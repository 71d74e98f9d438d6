"""EpisodeStats: window statistics over the last 100 episodes, periods, lifetime counters."""

from __future__ import annotations

import math

import numpy as np

from rolloutfleet.sampling.episode_stats import WINDOW, EpisodeStats


def test_window_statistics_are_over_the_last_window_episodes() -> None:
    stats = EpisodeStats()
    stats.episodes(np.arange(150, dtype=np.float64), np.full(150, 7))
    stats.period.env_steps, stats.period.seconds = 1050, 2.0
    metrics = stats.metrics()
    assert WINDOW == 100
    # Episodes 50..149: the mean of that range, its ends, all 150 counted this period.
    assert metrics["episode_return_mean"] == np.arange(50, 150).mean()
    assert (metrics["episode_return_min"], metrics["episode_return_max"]) == (50.0, 149.0)
    assert metrics["num_episodes"] == metrics["num_episodes_lifetime"] == 150
    assert metrics["episode_len_mean"] == 7 and metrics["env_steps_per_s"] == 525.0
    after = stats.metrics()  # a new period: counters start again, the window stays
    assert after["num_episodes"] == 0 and after["num_env_steps_sampled"] == 0 and after["env_steps_per_s"] == 0.0
    assert after["episode_return_mean"] == metrics["episode_return_mean"]


def test_no_episode_yet_is_nan_not_zero() -> None:
    metrics = EpisodeStats().metrics()
    assert math.isnan(metrics["episode_return_mean"]) and math.isnan(metrics["episode_len_mean"])
    assert "num_agent_steps_sampled" not in metrics


def test_multi_agent_episodes_keep_windows_per_agent_and_policy() -> None:
    stats = EpisodeStats(agent_steps=True)
    stats.episode(3.0, 10, {"agent": {"a0": 1.0, "a1": 2.0}, "policy": {"red": 3.0}})
    stats.episode(5.0, 20, {"agent": {"a0": 5.0}, "policy": {"red": 5.0}})
    stats.period.agent_steps = 40
    metrics = stats.metrics()
    assert metrics["episode_return_mean"] == 4.0 and metrics["episode_len_mean"] == 15
    assert metrics["agent/a0/episode_return_mean"] == 3.0 and metrics["agent/a1/episode_return_mean"] == 2.0
    assert metrics["policy/red/episode_return_mean"] == 4.0 and metrics["num_agent_steps_sampled"] == 40


def test_lifetime_counters_survive_state_including_the_open_period() -> None:
    stats = EpisodeStats(agent_steps=True)
    stats.lifetime_env_steps, stats.lifetime_agent_steps = 100, 250
    stats.episodes(np.ones(3), np.ones(3, np.int64))  # not yet reported by metrics()
    fresh = EpisodeStats(agent_steps=True)
    fresh.set_state(stats.get_state())
    metrics = fresh.metrics()
    assert metrics["num_env_steps_sampled_lifetime"] == 100 and metrics["num_agent_steps_sampled_lifetime"] == 250
    assert metrics["num_episodes_lifetime"] == 3


def test_state_set_on_a_runner_with_an_open_period_is_not_counted_twice() -> None:
    running = EpisodeStats()
    running.episodes(np.ones(2), np.ones(2, np.int64))  # ended since its last metrics()
    running.set_state({"num_episodes_lifetime": 10})
    assert running.get_state()["num_episodes_lifetime"] == 10
    assert running.metrics()["num_episodes_lifetime"] == 10
    running.episodes(np.ones(1), np.ones(1, np.int64))
    assert running.metrics()["num_episodes_lifetime"] == 11


def test_custom_values_are_windowed_per_key_and_non_numbers_counted() -> None:
    stats = EpisodeStats()
    for k in range(150):
        stats.custom_values({"lap": float(k), "odd": k} if k % 2 else {"lap": float(k)})
    stats.custom_values({"lap": float("nan"), "flag": True, "name": "x"})
    metrics = stats.metrics()
    assert metrics["custom/lap_mean"] == np.arange(50, 150).mean()  # the last 100 episodes that set it
    assert (metrics["custom/lap_min"], metrics["custom/lap_max"]) == (50.0, 149.0)
    assert metrics["custom/odd_mean"] == np.arange(1, 150, 2).mean()  # 75 episodes set it: all in the window
    assert metrics["num_custom_metrics_rejected"] == 3
    assert "num_custom_metrics_rejected" not in stats.metrics()  # per period

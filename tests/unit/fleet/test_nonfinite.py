"""A worker's tally of NaN/inf rows: per fragment and over its lifetime, single- and multi-agent."""

from __future__ import annotations

import numpy as np

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.multiagent_batch import MultiAgentBatch
from rolloutfleet.fleet.nonfinite import NonFinite, NonFiniteTally


def batch(bad_obs: int, bad_rewards: int, rows: int = 10) -> SampleBatch:
    obs = np.zeros((rows, 2), np.float32)
    obs[:bad_obs, 0] = np.nan
    rewards = np.zeros(rows, np.float32)
    rewards[rows - bad_rewards :] = np.inf
    return SampleBatch({"obs": obs, "new_obs": np.zeros((rows, 2), np.float32), "rewards": rewards})


def test_tally_reports_each_fragment_and_keeps_lifetime_counts() -> None:
    tally = NonFiniteTally()
    assert not tally.observe(batch(0, 0), quarantined=0)
    assert tally.observe(batch(2, 1), quarantined=2) == NonFinite(2, 1, 2)
    assert tally.observe(batch(1, 0), quarantined=3) == NonFinite(1, 0, 1)
    assert tally.lifetime() == {"nonfinite_obs": 3, "nonfinite_rewards": 1, "filter_quarantined": 3}


def test_multi_agent_batches_count_every_policy() -> None:
    multi = MultiAgentBatch({"red": batch(1, 1), "blue": batch(2, 0)}, env_steps=10)
    assert NonFiniteTally().observe(multi, quarantined=0) == NonFinite(3, 1, 0)

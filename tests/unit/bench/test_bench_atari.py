"""bench_atari's JSON: one row per sub-env count with each column's median; only the acting
table names the policy's device (random actions run no policy)."""

from __future__ import annotations

import argparse

from bench.bench_atari import COLUMNS, json_table


def test_rows_per_env_count_and_the_device_only_where_a_policy_acts() -> None:
    args = argparse.Namespace(repeats=3, seconds=1.0)
    medians = [
        (8, {"gym sync": 2_965.0, "ours/gym": 2_866.0, "ours/envpool": 4_963.0, "envpool": 5_833.0}),
        (64, {"gym sync": 1_742.0, "ours/gym": 1_891.0, "ours/envpool": 1_328.0, "envpool": 2_316.0}),
    ]
    random = json_table("random actions", medians, args, "cpu")
    acting = json_table("Nature CNN acting", medians, args, "cuda:0")
    assert random.series == COLUMNS and random.x == "envs"
    assert random.rows == [{"envs": 8, **medians[0][1]}, {"envs": 64, **medians[1][1]}]
    assert "cpu" not in random.title and "policy on cuda:0" in acting.title
    assert "median of 3 x 1 s" in acting.title

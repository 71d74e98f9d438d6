"""bench_multiagent's JSON row: each median under its own column, agent steps apart from env steps."""

from __future__ import annotations

from bench.bench_multiagent import SERIES, table_row


def test_a_row_puts_agent_and_env_rates_under_their_columns() -> None:
    agents = {"bare": 40_000.0, "ours": 30_000.0, "single": 5_000.0}
    envs = {"bare": 10_000.0, "ours": 7_000.0, "single": 20_000.0}
    row = table_row(8, agents, envs)
    assert row == {
        "envs": 8,
        "bare agent steps/s": 40_000.0,
        "ours agent steps/s": 30_000.0,
        "ours env steps/s": 7_000.0,
        "single-agent env steps/s": 20_000.0,
    }
    assert list(row)[1:] == SERIES  # every drawn column is in the row, in the legend's order

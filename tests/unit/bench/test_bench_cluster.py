"""bench_cluster's JSON: one row per (batch, shards) with ours beside the raw ceiling, and the
shards 100 workers need per batch."""

from __future__ import annotations

from bench.bench_cluster import OURS, RAW, tables


def test_rows_per_batch_and_shard_count_and_the_sizing() -> None:
    measured = {
        ("CartPole 2048 rows", 1): (432.0, 467.0),
        ("CartPole 2048 rows", 3): (286.0, 206.0),
        ("Atari 32x84x84x4 uint8", 1): (356.0, 345.0),
    }
    rate, sizing = tables(measured, {"CartPole": 3, "Atari": 32}, 1.0, 1)
    assert rate.unit == "MB/s" and rate.series == [OURS, RAW]
    assert rate.rows == [
        {"batch, shards": "CartPole, 1 shard", OURS: 432.0, RAW: 467.0},
        {"batch, shards": "CartPole, 3 shards", OURS: 286.0, RAW: 206.0},
        {"batch, shards": "Atari, 1 shard", OURS: 356.0, RAW: 345.0},
    ]
    assert sizing.rows == [{"batch": "CartPole", "shards": 3}, {"batch": "Atari", "shards": 32}]
    assert "1 s, median of 1" in rate.title

"""The ranks of one data-parallel learner (torchrun / DDP) on one fleet, against a real
redis-server: one consumer group, one consumer a rank; ``get(min_steps=n, max_steps=n)``
gives every rank exactly n rows, a message cut in two acknowledged with its last rows;
every row reaches exactly one rank; a rank that dies leaves its rows to the others; the
autoscaler's appetite counts every rank."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys

pytestmark = pytest.mark.integration
WORKER_DIR = str(Path(__file__).resolve().parents[3] / "worker")
GROUP = "ddp"
ENTRIES, ROWS = 20, 7  # 7-row fragments, 10-row steps: most steps cut a message in two
STEP = 10


def publish_all(url: str) -> set[tuple[int, int]]:
    """ENTRIES fragments; each row known by (fragment, row)."""
    publisher = BatchPublisher(url, "fleet")
    for value in range(ENTRIES):
        publisher.publish({"value": np.full(ROWS, value, np.int64), "t": np.arange(ROWS, dtype=np.int64)})
    return {(value, t) for value in range(ENTRIES) for t in range(ROWS)}


def rows_of(batch: dict[str, np.ndarray]) -> list[tuple[int, int]]:
    return list(zip(batch["value"].tolist(), batch["t"].tolist(), strict=True))


def rank(url: str, index: int, **options: float) -> BatchConsumer:
    return BatchConsumer(url, "fleet", group=GROUP, consumer=f"rank-{index}", block_s=0.05, **options)  # type: ignore[arg-type]


def test_max_steps_cuts_a_message_and_acknowledges_it_with_its_last_rows(redis_url: str) -> None:
    publisher = BatchPublisher(redis_url, "fleet")
    for value in range(5):
        publisher.publish({"value": np.full(10, value, np.int64)})
    consumer = BatchConsumer(redis_url, "fleet", block_s=0.05, read_count=3)
    first = consumer.get(min_steps=25, max_steps=25, timeout=5)
    assert first["value"].tolist() == [0] * 10 + [1] * 10 + [2] * 5
    second = consumer.get(min_steps=25, max_steps=25, timeout=5)  # acks entries 0 and 1, not 2
    assert second["value"].tolist() == [2] * 5 + [3] * 10 + [4] * 10
    assert consumer.lag().pending == 3  # entry 2 (its tail is in this batch), 3 and 4
    consumer.commit()
    assert consumer.lag().pending == 0
    with pytest.raises(ValueError, match="max_steps must be a whole number >= 25, got 24"):
        consumer.get(min_steps=25, max_steps=24)


def test_a_rank_reads_the_entries_it_needs_not_read_count_and_leaves_the_rest_to_its_peers(redis_url: str) -> None:
    published = publish_all(redis_url)  # 20 fragments of 7 rows, read_count 16
    first, second = rank(redis_url, 0), rank(redis_url, 1)
    assert len(first.get(min_steps=STEP, max_steps=STEP, timeout=5)) == STEP  # 1 entry, then 1 more: 14 rows
    assert len(second.get(min_steps=STEP, max_steps=STEP, timeout=5)) == STEP  # left there by rank 0
    pending = redis.Redis.from_url(redis_url).xpending(job_keys("default", "fleet").batches, GROUP)
    assert {c["name"]: c["pending"] for c in pending["consumers"]} == {b"rank-0": 2, b"rank-1": 2}
    for consumer in (first, second):
        consumer.close()
    assert len(published) == ENTRIES * ROWS


def test_two_ranks_get_equal_batches_and_every_row_exactly_once(redis_url: str) -> None:
    published = publish_all(redis_url)
    steps = len(published) // STEP // 2  # 7 steps a rank: all 140 rows
    got: dict[int, list[list[tuple[int, int]]]] = {0: [], 1: []}

    def run(index: int) -> None:
        with rank(redis_url, index) as consumer:
            for _ in range(steps):
                batch = consumer.get(min_steps=STEP, max_steps=STEP, timeout=30)
                got[index].append(rows_of(batch))

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [len(b) for b in got[0]] == [STEP] * steps and [len(b) for b in got[1]] == [STEP] * steps
    seen = [row for index in (0, 1) for batch in got[index] for row in batch]
    assert len(seen) == len(set(seen)) and set(seen) == published
    group = redis.Redis.from_url(redis_url).xinfo_groups(job_keys("default", "fleet").batches)
    assert [(g["name"], g["consumers"], g["pending"]) for g in group] == [(GROUP.encode(), 2, 0)]
    appetite = redis.Redis.from_url(redis_url).hgetall(job_keys("default", "fleet").appetite)
    assert {b"ddp/rank-0", b"ddp/rank-1"} <= set(appetite)  # the autoscaler sums the group's consumers


DYING_RANK = """
import os, sys
from rolloutfleet.transport.consumer import BatchConsumer
consumer = BatchConsumer(sys.argv[1], "fleet", group="ddp", consumer="rank-1", block_s=0.05)
batch = consumer.get(min_steps=10, max_steps=10, timeout=10)
print(len(batch), flush=True)
os._exit(1)  # dies mid-step: its rows read, never acknowledged
"""


def test_the_rows_of_a_rank_that_died_go_to_the_other_rank(redis_url: str) -> None:
    published = publish_all(redis_url)
    env = {**os.environ, "PYTHONPATH": WORKER_DIR}
    dying = subprocess.run(
        [sys.executable, "-c", DYING_RANK, redis_url], env=env, capture_output=True, text=True, timeout=60
    )
    assert dying.stdout.strip() == "10", dying.stderr
    seen: list[tuple[int, int]] = []
    with rank(redis_url, 0, reclaim_idle_s=0.2) as survivor:
        for _ in range(len(published) // STEP):
            seen += rows_of(survivor.get(min_steps=STEP, max_steps=STEP, timeout=30))
        assert survivor.stats.reclaimed == 2  # the two fragments rank 1 had read (7 + 3 of 7 rows)
    assert len(seen) == len(set(seen)) and set(seen) == published

"""A learner that asks get() for more rows than the fleet may keep in its stream, against a real
redis-server: the workers wait for room the learner's own group holds, the learner waits for
rows, and the learner says so (with the numbers) instead of waiting in silence."""

from __future__ import annotations

import logging
import re
import threading

import numpy as np
import pytest

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.consuming import wait as consumer_wait
from rolloutfleet.transport.publisher import BatchPublisher

pytestmark = pytest.mark.integration
BATCH = {"obs": np.zeros((100, 4), np.float32)}


def test_a_get_that_asks_for_more_than_maxlen_entries_hold_says_why_it_cannot_end(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(consumer_wait, "SAY_AFTER_S", 2.0)
    with (
        BatchPublisher(redis_url, "greedy", max_len=2, block_timeout_s=60) as publisher,
        BatchConsumer(redis_url, "greedy", group="ppo", block_s=0.2) as consumer,
    ):
        consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it is a learner's
        publisher.publish(BATCH)
        publisher.publish(BATCH)
        waiting = threading.Thread(target=publisher.publish, args=(BATCH,))  # waits for room
        waiting.start()
        with caplog.at_level(logging.WARNING, logger="rolloutfleet.transport.consuming.wait"):
            assert consumer.get(min_steps=300, timeout=4) is None  # 200 rows can be had, never 300
        lines = [r.getMessage() for r in caplog.records if "no more can come" in r.getMessage()]
        assert len(lines) == 1, caplog.text
        assert re.match(r"get\(min_steps=300\) has waited \d+ s holding 200 rows, and no more can come", lines[0])
        assert "group 'ppo'" in lines[0] and "hold all 2 entries spec.redis.maxLen lets it keep" in lines[0]
        assert len(consumer.get(min_steps=200, timeout=0)) == 200  # asked for what fits: served at once
        consumer.commit()  # room: the waiting publish goes in
        waiting.join(30)
        assert not waiting.is_alive() and publisher.stats.blocked == 1


def test_a_get_that_waits_for_workers_that_are_merely_slow_says_nothing(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(consumer_wait, "SAY_AFTER_S", 1.0)
    with (
        BatchConsumer(redis_url, "slow", group="ppo", block_s=0.2) as consumer,
        caplog.at_level(logging.WARNING, logger="rolloutfleet.transport.consuming.wait"),
    ):
        assert consumer.get(min_steps=300, timeout=2.5) is None
    assert "no more can come" not in caplog.text

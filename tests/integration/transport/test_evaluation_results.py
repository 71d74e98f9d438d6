"""The evaluation board on a real redis-server: episodes handed out once, a version
completed by exactly one record, summaries read back newest version last."""

from __future__ import annotations

import json

import redis

from rolloutfleet.transport.evaluation_results import EvaluationBoard, read_results, results_key
from rolloutfleet.transport.redis.keys import job_keys

KEYS = job_keys("default", "board")


def test_claims_hand_out_each_episode_once_across_boards(redis_url: str) -> None:
    a, b = (EvaluationBoard(redis.Redis.from_url(redis_url), KEYS, episodes=5) for _ in range(2))
    claimed = [a.claim(3), b.claim(3), a.claim(3), b.claim(3), a.claim(3)]
    assert claimed == [0, 1, 2, 3, 4]
    assert a.claim(3) is None and b.claim(3) is None  # all handed out
    assert a.claim(4) == 0  # another version has its own
    assert 0 < a.client.ttl(f"{KEYS.tag}:evaluation:3:claims") <= 86_400


def test_only_the_record_that_completes_a_version_gets_its_episodes(redis_url: str) -> None:
    a, b = (EvaluationBoard(redis.Redis.from_url(redis_url), KEYS, episodes=3) for _ in range(2))
    assert a.record(1, 2, 30.0, 30) is None
    assert b.record(1, 0, 10.0, 10) is None
    assert a.record(1, 0, 10.0, 10) is None  # the same episode again (a retried write): completes nothing
    assert b.record(1, 1, 20.5, 21) == [(10.0, 10), (20.5, 21), (30.0, 30)]  # by index
    assert a.record(1, 1, 20.5, 21) is None  # written already: no second summary


def test_results_read_back_by_version_newest_entry_of_a_version_wins(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    board = EvaluationBoard(client, KEYS, episodes=1)
    for version, mean in ((2, 5.0), (1, 1.0), (2, 6.0)):
        board.publish({"version": version, "episodes": 1, "return_mean": mean})
    client.xadd(results_key(KEYS), {"summary": "not json"})
    client.xadd(results_key(KEYS), {"other": json.dumps({"version": 9})})
    assert [(r["version"], r["return_mean"]) for r in read_results(client, KEYS)] == [(1, 1.0), (2, 6.0)]
    assert read_results(client, job_keys("default", "nothing")) == []

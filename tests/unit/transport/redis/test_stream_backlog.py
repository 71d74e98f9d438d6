"""The pure parts of a job's stream backlog: one XINFO GROUPS entry, and shards summed."""

from __future__ import annotations

import doctest

import rolloutfleet.transport.redis.stream_backlog as stream_backlog
from rolloutfleet.transport.redis.stream_backlog import GroupBacklog, PolicyBacklog, group_backlog, merge_shards


def test_the_doc_examples_hold() -> None:
    assert doctest.testmod(stream_backlog, optionflags=doctest.ELLIPSIS).failed == 0


def test_a_group_entry_as_redis_py_returns_it() -> None:
    raw = {"name": b"learner", "consumers": 2, "pending": 4, "last-delivered-id": b"1-0", "entries-read": 9, "lag": 1}
    assert group_backlog(raw) == GroupBacklog("learner", pending=4, lag=1, entries_read=9)
    unknown = {"name": "late", "consumers": 0, "pending": 0, "entries-read": None, "lag": None}
    assert group_backlog(unknown) == GroupBacklog("late", pending=0, lag=None, entries_read=None)


def test_shards_add_up_and_an_unknown_lag_stays_unknown() -> None:
    shards = [
        (10, [GroupBacklog("a", 1, 3, 7), GroupBacklog("b", 0, 10, 0)]),
        (6, [GroupBacklog("a", 2, 1, 5), GroupBacklog("b", 0, None, None)]),
        (0, []),  # a shard no worker wrote yet
    ]
    assert merge_shards("red", shards) == PolicyBacklog(
        "red", 16, (GroupBacklog("a", 3, 4, 12), GroupBacklog("b", 0, None, None))
    )


def test_a_group_on_some_shards_only_counts_where_it_is() -> None:
    merged = merge_shards(None, [(4, [GroupBacklog("a", 1, 2, 2)]), (5, [])])
    assert merged == PolicyBacklog(None, 9, (GroupBacklog("a", 1, 2, 2),))

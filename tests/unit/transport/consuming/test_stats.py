"""A group's lag summed over a job's batch streams."""

from __future__ import annotations

from rolloutfleet.transport.consuming.stats import ConsumerLag, group_lag
from rolloutfleet.transport.redis.stream_status import GroupStatus, StreamStatus


def stream(length: int, *groups: GroupStatus) -> StreamStatus:
    return StreamStatus("default", "job", length, 0, None, list(groups))


def test_pending_and_undelivered_add_up_over_the_shards_and_the_oldest_age_wins() -> None:
    statuses = [
        stream(10, GroupStatus("learners", 1, 3, 2, 0.5), GroupStatus("other", 1, 9, 9, 9.0)),
        stream(20, GroupStatus("learners", 1, 1, 4, 1.5)),
    ]
    assert group_lag(statuses, "learners", 2) == ConsumerLag(4, 6, 1.5, 2)


def test_a_shard_without_the_group_counts_its_whole_length_as_undelivered() -> None:
    statuses = [stream(10, GroupStatus("learners", 1, 0, 0, None)), stream(7)]
    assert group_lag(statuses, "learners", None) == ConsumerLag(0, 7, None, None)


def test_an_unknown_undelivered_count_on_any_shard_makes_the_sum_unknown() -> None:
    statuses = [stream(10, GroupStatus("learners", 1, 2, None, 3.0)), stream(5, GroupStatus("learners", 1, 1, 1, None))]
    assert group_lag(statuses, "learners", 0) == ConsumerLag(3, None, 3.0, 0)

"""Which entries every learner group has consumed, from Redis's own replies (pure)."""

from __future__ import annotations

from rolloutfleet.transport.redis.room import undelivered
from rolloutfleet.transport.redis.stream_load import consumed_bound, stream_id


def group(name: str, last: str, lag: int | None = 0) -> dict[str, object]:
    return {"name": name.encode(), "last-delivered-id": last.encode(), "lag": lag}


def test_a_group_with_nothing_pending_has_consumed_up_to_its_last_delivered_entry() -> None:
    assert consumed_bound([group("learner", "1700-4")], [{"pending": 0}], ["learner"]) == (1700, 5)


def test_a_pending_entry_is_kept_and_so_is_everything_after_it() -> None:
    assert consumed_bound([group("learner", "1800-0")], [{"pending": 3, "min": b"1750-2"}], ["learner"]) == (1750, 2)


def test_the_slowest_learner_group_decides() -> None:
    groups = [group("a", "1800-0"), group("b", "1600-9")]
    assert consumed_bound(groups, [{"pending": 0}, {"pending": 0}], ["a", "b"]) == (1600, 10)


def test_groups_that_are_not_learners_are_not_waited_for() -> None:
    groups = [group("learner", "1800-0"), group("inspect", "10-0")]
    assert consumed_bound(groups, [{"pending": 0}], ["learner"]) == (1800, 1)


def test_a_learner_group_gone_meanwhile_trims_nothing() -> None:
    assert consumed_bound([group("other", "5-0")], [{"pending": 0}], ["learner"]) is None
    assert consumed_bound([], [], []) is None


def test_ids_order_as_redis_orders_them() -> None:
    assert stream_id("10-2") < stream_id("10-10") < stream_id(b"11-0")


def test_undelivered_is_the_slowest_groups_lag_or_everything_it_cannot_tell() -> None:
    assert undelivered(10, [group("a", "1-0", lag=3), group("b", "1-0", lag=7)]) == 7
    assert undelivered(10, [group("a", "1-0", lag=None)]) == 10
    assert undelivered(10, []) == 10

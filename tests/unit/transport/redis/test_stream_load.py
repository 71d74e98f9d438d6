"""Which consumer groups hold ``block`` backpressure: the pure rule, on XINFO-shaped replies."""

from __future__ import annotations

from typing import Any

from rolloutfleet.transport.redis.stream_load import StreamLoad, group_idle_ms, stream_load


def group(name: str, lag: int | None, pending: int = 0) -> dict[str, Any]:
    return {"name": name.encode(), "lag": lag, "pending": pending, "consumers": 1}


def test_the_slowest_learner_group_decides() -> None:
    groups = [group("learner", 1, pending=2), group("eval", 4)]
    assert stream_load(10, groups, {"learner": 50, "eval": 900}, 120) == StreamLoad(4, "eval")


def test_a_group_nobody_has_read_for_learner_idle_s_is_left_out() -> None:
    groups = [group("learner", 1), group("inspect", 4)]
    load = stream_load(10, groups, {"learner": 50, "inspect": 121_000}, 120)
    assert load == StreamLoad(1, "learner", ("inspect",))


def test_a_group_without_consumers_is_left_out() -> None:
    assert stream_load(10, [group("learner", 0), group("new", 10)], {"learner": 5, "new": None}, 120) == StreamLoad(
        0, "learner", ("new",)
    )


def test_without_a_learner_group_the_whole_stream_counts() -> None:
    assert stream_load(7, [], {}, 120) == StreamLoad(7, None)
    assert stream_load(7, RuntimeError("no such key"), {}, 120) == StreamLoad(7, None)
    assert stream_load(7, [group("inspect", 0)], {"inspect": 500_000}, 120) == StreamLoad(7, None, ("inspect",))


def test_an_unknown_lag_counts_the_whole_stream_and_pending_entries_count() -> None:
    assert stream_load(9, [group("learner", None)], {"learner": 0}, 120) == StreamLoad(9, "learner")
    assert stream_load(9, [group("learner", 2, pending=3)], {"learner": 0}, 120) == StreamLoad(5, "learner")


def test_a_group_is_as_recent_as_its_latest_sign_of_reading() -> None:
    now = [1_700_000_010, 500_000]  # TIME: seconds, microseconds
    consumers = [[{"name": b"a", "idle": 9_000}, {"name": b"b", "idle": 4_000}], [{"name": b"c", "idle": 7_000}], []]
    reading = {b"declared": b"1700000009500", b"inspect": b"1700000000000"}
    idle = group_idle_ms(["delivered", "declared", "inspect"], consumers, reading, now)
    assert idle == {"delivered": 4_000, "declared": 1_000, "inspect": 10_500}
    assert group_idle_ms(["gone"], [RuntimeError("NOGROUP")], {}, now) == {"gone": None}


def test_a_group_delivered_up_to_the_last_entry_has_nothing_undelivered_whatever_its_lag() -> None:
    # Seen after Redis restarts: lag 1342, last-delivered-id the stream's last entry, nothing pending.
    stale = {**group("learner", 1342), "last-delivered-id": b"1795458011515-0"}
    assert stream_load(70, [stale], {"learner": 50}, 120) == StreamLoad(70, "learner")
    assert stream_load(70, [stale], {"learner": 50}, 120, "1795458011515-0") == StreamLoad(0, "learner")
    behind = {**group("learner", 3), "last-delivered-id": b"1795458011000-0"}
    assert stream_load(70, [behind], {"learner": 50}, 120, "1795458011515-0") == StreamLoad(3, "learner")


def test_a_group_never_read_that_waits_at_the_streams_end_is_let_one_entry_in() -> None:
    """XGROUP CREATE at ``$`` on a full stream, then a blocked XREADGROUP: Redis lists no
    consumer until it delivers an entry, so the group is never seen reading."""
    at_end = {**group("late", 0), "consumers": 0, "last-delivered-id": b"1795458011515-0"}
    assert stream_load(50, [at_end], {"late": None}, 120) == StreamLoad(50, None, ("late",), waiting="late")
    stale_lag = {**at_end, "lag": 12}  # the last id says it is at the end
    assert stream_load(50, [stale_lag], {"late": None}, 120, "1795458011515-0").waiting == "late"
    # Not waiting: an entry after it, one pending, a group once read (gone), or a learner reading.
    assert stream_load(50, [{**at_end, "lag": 1}], {"late": None}, 120).waiting is None
    assert stream_load(50, [group("late", 0, pending=1)], {"late": None}, 120).waiting is None
    assert stream_load(50, [at_end], {"late": 500_000}, 120).waiting is None
    load = stream_load(50, [at_end, group("learner", 7)], {"late": None, "learner": 10}, 120)
    assert load == StreamLoad(7, "learner", ("late",))

"""The declared columns without Redis: the hash's fields, the schema a learner sees, and what
a consumer judges against (the declaration, else the recent majority, ties to the newest)."""

from __future__ import annotations

import numpy as np

from rolloutfleet.transport.declared_columns import SchemaReference, parse_schema, published_schema, schema_fields
from rolloutfleet.transport.entries import Schema, schema_of

GOOD: Schema = (("obs", "float32", (4,)), ("rewards", "float32", ()))
ODD: Schema = (("obs", "float32", (5,)), ("rewards", "float32", ()))


def test_fields_round_trip_and_a_damaged_hash_judges_nothing() -> None:
    raw = {k.encode(): v.encode() for k, v in schema_fields(GOOD).items()}
    assert parse_schema(raw) == GOOD
    assert parse_schema({}) is None
    assert parse_schema({b"obs": b"not json"}) is None
    assert parse_schema({b"obs": b'{"dtype": "float32"}'}) is None


def test_a_policy_stream_declares_the_text_agent_id_a_learner_decodes() -> None:
    part = {"obs": np.zeros((3, 2), np.float32), "agent_index": np.array([0, 1, 0])}
    assert published_schema(part, ["red_0", "red_1"], "red") == schema_of({**part, "agent_id": np.array(["x"])})
    assert published_schema(part, ["red_0"], None) == schema_of(part)  # the job's own stream: as it is


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_declaration_is_the_reference_whatever_was_read_first() -> None:
    reads: list[Schema | None] = []
    ref = SchemaReference(lambda: reads.append(GOOD) or GOOD, clock=Clock())  # type: ignore[func-returns-value]
    ref.saw([ODD, ODD, ODD])
    assert ref.current() == GOOD
    reasons = ref.judge([ODD, GOOD])
    assert reasons[1] is None and reasons[0] == "column 'obs' has rows of shape (5,), the batch's have (4,)"


def test_the_declaration_is_read_again_after_a_while_and_at_once_on_a_mismatch() -> None:
    clock, declared = Clock(), [GOOD]
    reads = []

    def read() -> Schema:
        reads.append(clock.now)
        return declared[0]

    ref = SchemaReference(read, clock=clock, refresh_s=2.0)
    assert ref.judge([GOOD]) == [None] and reads == [0.0]
    clock.now = 1.0
    assert ref.judge([GOOD]) == [None] and reads == [0.0]  # trusted for 2 s
    declared[0] = ODD  # a rollout: the new workers declared another obs
    clock.now = 1.5
    assert ref.judge([ODD]) == [None] and reads == [0.0, 1.5]  # the mismatch read it again
    clock.now = 4.0
    ref.judge([ODD])
    assert reads == [0.0, 1.5, 4.0]


def test_with_nothing_declared_the_recent_majority_decides_ties_to_the_newest() -> None:
    ref = SchemaReference(lambda: None, clock=Clock())
    assert ref.current() is None and ref.judge([ODD]) == [None]  # nothing read yet: nothing refused
    ref.saw([ODD])
    assert ref.current() == ODD
    ref.saw([GOOD])
    assert ref.current() == GOOD  # one each: the newest
    ref.saw([ODD])
    assert ref.current() == ODD
    ref.saw([GOOD, GOOD])
    assert ref.current() == GOOD and ref.judge([ODD])[0] is not None


def test_the_majority_forgets_what_is_older_than_its_window() -> None:
    ref = SchemaReference(lambda: None, clock=Clock(), window=4)
    ref.saw([ODD] * 10)
    ref.saw([GOOD] * 3)
    assert ref.current() == GOOD

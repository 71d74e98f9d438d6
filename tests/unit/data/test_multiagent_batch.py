"""MultiAgentBatch: counts, selection, concatenation, .npz names, and the codec round trip."""

from __future__ import annotations

import numpy as np

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.codec import decode_multi, encode_multi
from rolloutfleet.data.multiagent_batch import MultiAgentBatch


def part(rows: int, agent: int, start: float = 0.0) -> SampleBatch:
    return SampleBatch(
        {
            "obs": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) + start,
            "agent_index": np.full(rows, agent, np.int32),
            "agent_id": np.asarray(["red_0", "blue_0"])[np.full(rows, agent)],
        }
    )


def batch() -> MultiAgentBatch:
    return MultiAgentBatch({"red": part(3, 0), "blue": part(2, 1)}, env_steps=3, agent_ids=["red_0", "blue_0"])


def test_counts_and_selection() -> None:
    b = batch()
    assert b.env_steps() == 3 and b.agent_steps() == 5 and b.count == 3
    only = b.select(["blue"])
    assert list(only) == ["blue"] and only.env_steps() == 3 and only.agent_steps() == 2


def test_concat_adds_up_per_policy() -> None:
    joined = MultiAgentBatch.concat([batch(), MultiAgentBatch({"red": part(1, 0, 100.0)}, env_steps=1)])
    assert len(joined["red"]) == 4 and len(joined["blue"]) == 2 and joined.env_steps() == 4
    assert joined["red"]["obs"][-1, 0] == 100.0


def test_npz_names_are_policy_slash_column() -> None:
    arrays = batch().to_npz_arrays()
    assert "red/obs" in arrays and "blue/agent_id" in arrays
    assert arrays["blue/agent_id"].tolist() == ["blue_0", "blue_0"]


def test_codec_round_trips_every_numeric_column_of_every_policy() -> None:
    b = batch()
    decoded = decode_multi(encode_multi(b.wire_columns(), compression="lz4"))
    assert set(decoded) == {"red", "blue"}
    for policy, columns in b.wire_columns().items():
        assert set(decoded[policy]) == set(columns) and "agent_id" not in decoded[policy]
        for name, column in columns.items():
            np.testing.assert_array_equal(decoded[policy][name], column)

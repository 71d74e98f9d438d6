"""Key naming: one hash tag per job, names Kubernetes would refuse are refused."""

from __future__ import annotations

import pytest

from rolloutfleet.transport.redis.keys import (
    BATCHES_PATTERN,
    MAX_SHARDS,
    SLOTS,
    job_keys,
    key_slot,
    parse_batches_key,
    parse_shard,
    parse_stream_key,
)


def test_every_key_of_a_job_shares_one_hash_tag() -> None:
    keys = job_keys("team-a", "cartpole")
    names = [keys.batches, keys.dead_letters, keys.heartbeats, keys.weights_version, keys.weights_counter,
             keys.weights_chunk(3, 1)]  # fmt: skip
    assert all(name.startswith("rolloutfleet:{team-a/cartpole}:") for name in names)
    assert len(set(names)) == len(names)
    assert keys.batches == "rolloutfleet:{team-a/cartpole}:batches"


def test_jobs_do_not_collide_across_namespaces() -> None:
    assert job_keys("a", "b-c").batches != job_keys("a-b", "c").batches


@pytest.mark.parametrize(("namespace", "job", "field"), [("", "x", "namespace"), ("ns", "a/b", "job"),
                                                         ("ns", "x}", "job"), ("n s", "x", "namespace")])  # fmt: skip
def test_names_kubernetes_would_refuse_are_refused(namespace: str, job: str, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field} "):
        job_keys(namespace, job)


def test_parse_batches_key_round_trips_and_ignores_other_keys() -> None:
    keys = job_keys("default", "pong")
    assert parse_batches_key(keys.batches) == ("default", "pong")
    assert parse_batches_key(keys.batches.encode()) == ("default", "pong")
    assert parse_batches_key(keys.heartbeats) is None
    assert BATCHES_PATTERN == "rolloutfleet:{*}:batches"


def test_policy_keys_are_the_jobs_with_the_policy_appended() -> None:
    red, blue, job = job_keys("ns", "tag", "red"), job_keys("ns", "tag", "blue"), job_keys("ns", "tag")
    assert red.batches == "rolloutfleet:{ns/tag}:batches:red"
    assert red.weights_version == "rolloutfleet:{ns/tag}:weights:red:version"
    assert red.weights_chunk(3, 0) == "rolloutfleet:{ns/tag}:weights:red:3:0"
    names = {k.batches for k in (red, blue, job)} | {k.weights_version for k in (red, blue, job)}
    names |= {k.weights_counter for k in (red, blue, job)} | {k.weights_chunk(1, 0) for k in (red, blue, job)}
    assert len(names) == 12, "no key of one policy is another's or the job's"
    assert red.dead_letters == job.dead_letters and red.heartbeats == job.heartbeats
    assert parse_stream_key(red.batches) == ("ns", "tag", "red")
    assert parse_stream_key(job.batches) == ("ns", "tag", None)
    assert parse_batches_key(red.batches) == ("ns", "tag")


@pytest.mark.parametrize("policy", ["", "1red", "a:b", "a/b", "{x}"])
def test_policy_ids_the_spec_refuses_are_refused(policy: str) -> None:
    with pytest.raises(ValueError, match=r"^policy id"):
        job_keys("ns", "tag", policy)


def test_one_shard_keeps_the_names_of_a_job_with_no_shards() -> None:
    keys = job_keys("team-a", "cartpole")
    one = keys.shard(0, 1)
    assert (one.batches, one.dead_letters, one.learners, one.backpressure) == (
        keys.batches, keys.dead_letters, keys.learners, keys.backpressure
    )  # fmt: skip


def test_shards_of_a_job_fall_in_equal_slot_ranges_and_parse_back() -> None:
    import redis.crc  # the cluster client's own slot function, to check ours against

    for shards in (2, 3, 5, 16):
        for job in ("cartpole", "atari", "a.b-c"):
            for index, keys in enumerate(job_keys("team", job).all_shards(shards)):
                slot = redis.crc.key_slot(keys.batches.encode())
                assert key_slot(keys.batches) == slot
                width = SLOTS / shards
                assert index * width + width / 4 <= slot < (index + 1) * width - width / 4
                # The stream's companions share its slot; weights keep the job's.
                assert {key_slot(k) for k in (keys.dead_letters, keys.learners, keys.backpressure)} == {slot}
                assert keys.weights_version == job_keys("team", job).weights_version
                assert parse_stream_key(keys.batches) == ("team", job, None)
                assert parse_shard(keys.batches) == index


def test_a_policy_stream_of_a_shard_parses_back() -> None:
    keys = job_keys("ns", "tag", policy="red").shard(2, 3)
    assert parse_stream_key(keys.batches) == ("ns", "tag", "red") and parse_shard(keys.batches) == 2


@pytest.mark.parametrize(("index", "shards"), [(0, 0), (3, 3), (-1, 2), (0, MAX_SHARDS + 1)])
def test_impossible_shards_are_refused(index: int, shards: int) -> None:
    with pytest.raises(ValueError, match="shard"):
        job_keys("ns", "job").shard(index, shards)

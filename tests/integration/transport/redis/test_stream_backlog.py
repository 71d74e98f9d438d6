"""A job's stream backlog read from a real redis-server (and a real Redis Cluster) equals what
Redis itself answers: XLEN of each stream, XINFO GROUPS' pending, lag and entries-read of each
group, summed over the job's shards; the operator's gauges carry those numbers, drop a
destroyed group's series, and drop the job's series while its Redis cannot be read."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis
from prometheus_client import REGISTRY

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.keys import JobKeys, job_keys
from rolloutfleet.transport.redis.sharding import record_shards
from rolloutfleet.transport.redis.stream_backlog import (
    GroupBacklog,
    PolicyBacklog,
    read_backlog,
    read_job_backlog,
    stream_keys,
)
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.runtime import Runtime
from rolloutfleet_operator.redis.stream_metrics import read_stream_metrics

pytestmark = pytest.mark.integration
KEY = ("team", "cp")


def job_body(url: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "cp"}, "spec": {"env": {"id": "CartPole-v1"}, "redis": {"url": url}, **spec}}


def job(url: str, **spec: Any) -> RolloutJob:
    body = job_body(url, **spec)
    return RolloutJob.from_dict({**body, "metadata": {"name": "cp", "namespace": "team"}})


def fill(client: redis.Redis, stream: str, entries: int) -> None:
    for i in range(entries):
        client.xadd(stream, {"i": i})


def read_as(client: redis.Redis, stream: str, group: str, count: int, ack: int) -> None:
    """``group`` reads ``count`` entries and acknowledges the first ``ack`` of them."""
    got = client.xreadgroup(group, "c", {stream: ">"}, count=count)
    ids = [entry_id for _, entries in got for entry_id, _ in entries]
    assert len(ids) == count
    if ack:
        client.xack(stream, group, *ids[:ack])


def redis_says(client: redis.Redis, shards: list[JobKeys]) -> tuple[int, dict[str, GroupBacklog]]:
    """XLEN and XINFO GROUPS straight from Redis, summed over the shards by hand."""
    length, groups = 0, {}
    for keys in shards:
        length += client.xlen(keys.batches)
        for raw in client.xinfo_groups(keys.batches):
            name = raw["name"].decode()
            seen = groups.get(name, GroupBacklog(name, 0, 0, 0))
            lag = None if raw["lag"] is None or seen.lag is None else seen.lag + raw["lag"]
            read = raw["entries-read"]
            entries_read = None if read is None or seen.entries_read is None else seen.entries_read + read
            groups[name] = GroupBacklog(name, seen.pending + raw["pending"], lag, entries_read)
    return length, groups


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": "team", "job_name": "cp", "policy": "", **labels})


def test_one_stream_equals_xlen_and_xinfo_groups(redis_url: str) -> None:
    client = connect(redis_url)
    keys = job_keys("team", "cp")
    fill(client, keys.batches, 12)
    client.xgroup_create(keys.batches, "learner", id="0")
    client.xgroup_create(keys.batches, "late", id="$")
    read_as(client, keys.batches, "learner", count=5, ack=2)
    fill(client, keys.batches, 3)
    [backlog] = read_backlog(client, stream_keys(job(redis_url)))
    length, groups = redis_says(client, [keys])
    assert backlog.policy is None and backlog.entries == length == 15
    assert {g.name: g for g in backlog.groups} == groups
    # What the test did: learner read 5 of 15 and acknowledged 2. A group made at "$" (not at
    # "0" as BatchConsumer makes them): Redis 7.0 cannot tell its lag, even once it has read.
    assert groups["learner"] == GroupBacklog("learner", pending=3, lag=10, entries_read=5)
    assert groups["late"] == GroupBacklog("late", pending=0, lag=None, entries_read=None)
    read_as(client, keys.batches, "late", count=1, ack=1)
    [backlog] = read_backlog(client, stream_keys(job(redis_url)))
    assert {g.name: g for g in backlog.groups} == redis_says(client, [keys])[1]
    assert backlog.groups[0].name == "late" and backlog.groups[0].lag is None


def test_a_job_without_a_stream_yet_has_zero_entries_and_no_group(redis_url: str) -> None:
    assert read_job_backlog(redis_url, job(redis_url)) == [PolicyBacklog(None, 0, ())]


def test_shards_are_summed(redis_url: str) -> None:
    client = connect(redis_url)
    keys = job_keys("team", "cp")
    assert record_shards(client, keys, 2) == 2  # as a worker of spec.redis.shards: 2 records it
    shards = keys.all_shards(2)
    for n, shard in enumerate(shards):
        fill(client, shard.batches, 4 + n)
        client.xgroup_create(shard.batches, "learner", id="0")
        read_as(client, shard.batches, "learner", count=2 + n, ack=1)
    [backlog] = read_job_backlog(redis_url, job(redis_url, redis={"url": redis_url, "shards": 2}))
    length, groups = redis_says(client, shards)
    assert backlog.entries == length == 9
    assert backlog.groups == (groups["learner"],) == (GroupBacklog("learner", pending=3, lag=4, entries_read=5),)


def test_each_trained_policy_has_its_stream(redis_url: str) -> None:
    client = connect(redis_url)
    multi = {
        "policies": {"red": {}, "blue": {}},
        "policyMapping": {"rules": [{"prefix": "red_", "policy": "red"}, {"prefix": "blue_", "policy": "blue"}]},
        "policiesToTrain": ["red"],
    }
    spec = job(redis_url, env={"entryPoint": "rolloutfleet.examples.team_tag:make_env"}, multiAgent=multi)
    assert [k.policy for k in stream_keys(spec)] == ["red"]
    fill(client, job_keys("team", "cp", "red").batches, 6)
    fill(client, job_keys("team", "cp", "blue").batches, 2)  # not trained: no learner reads it
    [backlog] = read_job_backlog(redis_url, spec)
    assert (backlog.policy, backlog.entries) == ("red", 6)


@pytest.mark.asyncio
async def test_the_operators_gauges_carry_the_numbers_and_drop_what_is_gone(redis_url: str) -> None:
    client = connect(redis_url)
    keys = job_keys("team", "cp")
    fill(client, keys.batches, 8)
    client.xgroup_create(keys.batches, "learner", id="0")
    client.xgroup_create(keys.batches, "old", id="0")
    read_as(client, keys.batches, "learner", count=6, ack=4)
    runtime = Runtime(config=OperatorConfig(), api=cast(Any, None))  # no passwordSecret: no API call
    index = {KEY: [job_body(redis_url)]}
    await read_stream_metrics(KEY, runtime, index)
    length, groups = redis_says(client, [keys])
    assert gauge("rolloutfleet_operator_stream_entries") == length == 8
    for name, group in groups.items():
        assert gauge("rolloutfleet_operator_consumer_group_lag", group=name) == group.lag
        assert gauge("rolloutfleet_operator_consumer_group_pending", group=name) == group.pending
        assert gauge("rolloutfleet_operator_consumer_group_entries_read", group=name) == group.entries_read
    assert gauge("rolloutfleet_operator_consumer_group_lag", group="learner") == 2

    client.xgroup_destroy(keys.batches, "old")
    await read_stream_metrics(KEY, runtime, index)
    assert gauge("rolloutfleet_operator_consumer_group_lag", group="old") is None
    assert gauge("rolloutfleet_operator_consumer_group_pending", group="learner") == 2

    unreachable = {KEY: [job_body("redis://127.0.0.1:1/0")]}
    await read_stream_metrics(KEY, runtime, unreachable)
    assert gauge("rolloutfleet_operator_stream_entries") is None
    assert gauge("rolloutfleet_operator_consumer_group_lag", group="learner") is None


def test_a_cluster_job_spread_over_the_masters(cluster_url: str) -> None:
    client = connect(cluster_url)
    keys = job_keys("team", "cp")
    shards = keys.all_shards(3)  # the default on 3 masters: no shards key recorded
    for n, shard in enumerate(shards):
        fill(client, shard.batches, 3 + n)
        client.xgroup_create(shard.batches, "learner", id="0")
        read_as(client, shard.batches, "learner", count=1 + n, ack=n)
    [backlog] = read_job_backlog(cluster_url, job(cluster_url, redis={"url": cluster_url}))
    length, groups = redis_says(client, shards)
    assert backlog.entries == length == 12
    assert backlog.groups == (groups["learner"],) == (GroupBacklog("learner", pending=3, lag=6, entries_read=6),)


@pytest.mark.parametrize("shards", [1, 4])
def test_two_round_trips_whatever_the_shards_and_groups(redis_url: str, shards: int, monkeypatch: Any) -> None:
    client = connect(redis_url)
    keys = job_keys("team", "cp")
    record_shards(client, keys, shards)
    for shard in keys.all_shards(shards):
        fill(client, shard.batches, 3)
        for group in ("a", "b", "c"):
            client.xgroup_create(shard.batches, group, id="0")
    pipelines: list[int] = []
    singles: list[Any] = []
    execute, command = redis.client.Pipeline.execute, redis.Redis.execute_command

    def counted_execute(self: Any, raise_on_error: bool = True) -> Any:
        pipelines.append(len(self.command_stack))
        return execute(self, raise_on_error)

    def counted_command(self: Any, *args: Any, **options: Any) -> Any:
        singles.append(args[0])
        return command(self, *args, **options)

    monkeypatch.setattr(redis.client.Pipeline, "execute", counted_execute)
    monkeypatch.setattr(redis.Redis, "execute_command", counted_command)  # a Pipeline queues with its own
    [backlog] = read_backlog(client, stream_keys(job(redis_url, redis={"url": redis_url, "shards": shards})))
    assert (backlog.entries, len(backlog.groups)) == (3 * shards, 3)
    assert pipelines == [1, 2 * shards] and singles == []  # the shard count, then XLEN + XINFO GROUPS per shard

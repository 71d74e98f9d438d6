"""Progress from the workers' heartbeats: kept per job, best effort, the Redis password
read from its Secret at most once a minute."""

from __future__ import annotations

from typing import Any

import pytest

import rolloutfleet.transport.heartbeat
import rolloutfleet.transport.redis.clients
from rolloutfleet.transport.redis.clients import ClientLimit, RedisLook
from rolloutfleet_operator.config import OperatorConfig
from rolloutfleet_operator.loop.progress import CLIENTS_EVERY_S, PASSWORD_TTL_S, read_progress
from rolloutfleet_operator.loop.runtime import Runtime

KEY = ("team", "cp")
SECRET = {"url": "redis://r:6379/0", "passwordSecret": {"name": "redis-auth", "key": "password"}}


def indexed_job(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "cp"}, "spec": {"replicas": 2, "env": {"id": "CartPole-v1"}, **spec}, "status": {}}


@pytest.fixture
def redis_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str | None]]:
    """The heartbeat reads (url, job, password); each answers one fresh beat of worker 0."""
    reads: list[tuple[str, str, str | None]] = []

    def read_heartbeats(url: str, job: Any, password: str | None = None) -> dict[int, dict[str, float]]:
        reads.append((url, f"{job.namespace}/{job.name}", password))
        return {0: {"env_steps": 100.0, "steps_per_s": 5.0, "time": 1.0}}

    monkeypatch.setattr(rolloutfleet.transport.heartbeat, "read_heartbeats", read_heartbeats)
    monkeypatch.setattr(rolloutfleet.transport.redis.clients, "look", lambda url, password: RedisLook(None))
    return reads


@pytest.mark.asyncio
async def test_heartbeats_are_kept_with_the_job(kube: Any, redis_reads: list[Any]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    await read_progress(KEY, runtime, {KEY: [indexed_job()]})
    assert runtime.job(KEY).beats == {0: {"env_steps": 100.0, "steps_per_s": 5.0, "time": 1.0}}
    assert redis_reads == [("redis://localhost:6379/0", "team/cp", None)] and kube.calls == []


@pytest.mark.asyncio
async def test_the_password_is_read_from_its_secret_at_most_once_a_minute(kube: Any, redis_reads: list[Any]) -> None:
    kube.secrets[("team", "redis-auth")] = {"password": "s3cret"}
    runtime, index = Runtime(config=OperatorConfig(), api=kube.api()), {KEY: [indexed_job(redis=SECRET)]}
    await read_progress(KEY, runtime, index)
    await read_progress(KEY, runtime, index)
    assert [password for _, _, password in redis_reads] == ["s3cret", "s3cret"]
    assert len(kube.named("read_namespaced_secret")) == 1
    fetched_at, _ = runtime.job(KEY).password
    runtime.job(KEY).password = (fetched_at - PASSWORD_TTL_S, "s3cret")  # a minute later
    kube.secrets[("team", "redis-auth")] = {"password": "rotated"}
    await read_progress(KEY, runtime, index)
    assert redis_reads[-1][2] == "rotated" and len(kube.named("read_namespaced_secret")) == 2


@pytest.mark.asyncio
async def test_an_unreachable_redis_keeps_the_last_beats_and_raises_nothing(
    kube: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(*_: Any, **__: Any) -> Any:
        raise ConnectionError("redis is away")

    monkeypatch.setattr(rolloutfleet.transport.heartbeat, "read_heartbeats", unreachable)
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    runtime.job(KEY).beats = {1: {"env_steps": 7.0}}
    await read_progress(KEY, runtime, {KEY: [indexed_job()]})
    assert runtime.job(KEY).beats == {1: {"env_steps": 7.0}}


@pytest.mark.asyncio
async def test_a_job_gone_or_unusable_is_not_read(kube: Any, redis_reads: list[Any]) -> None:
    runtime = Runtime(config=OperatorConfig(), api=kube.api())
    await read_progress(KEY, runtime, {})
    await read_progress(KEY, runtime, {KEY: [indexed_job(env={"id": "CartPole-v1", "entryPoint": "pkg.mod:make"})]})
    assert redis_reads == [] and runtime.jobs == {}


@pytest.mark.asyncio
async def test_the_redis_client_limit_is_read_every_few_ticks_and_kept_through_a_failed_read(
    kube: Any, redis_reads: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = "redis at localhost:6379: connection refused"
    answers = [RedisLook(ClientLimit(most=10_000, connected=7)), RedisLook(None, refused)]
    asked: list[str] = []

    def look(url: str, password: str | None) -> RedisLook:
        asked.append(url)
        return answers.pop(0)

    monkeypatch.setattr(rolloutfleet.transport.redis.clients, "look", look)
    runtime, index = Runtime(config=OperatorConfig(), api=kube.api()), {KEY: [indexed_job()]}
    await read_progress(KEY, runtime, index)
    await read_progress(KEY, runtime, index)  # within CLIENTS_EVERY_S: heartbeats only
    assert asked == ["redis://localhost:6379/0"] and len(redis_reads) == 2 and runtime.job(KEY).redis_error is None
    read_at, limit = runtime.job(KEY).clients
    runtime.job(KEY).clients = (read_at - CLIENTS_EVERY_S, limit)
    await read_progress(KEY, runtime, index)  # looked again; Redis away: the last budget stays, the reason is kept
    assert len(asked) == 2 and runtime.job(KEY).clients[1] == ClientLimit(most=10_000, connected=7)
    assert runtime.job(KEY).redis_error == refused

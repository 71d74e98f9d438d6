"""Weights announcements (:mod:`rolloutfleet.transport.weights_news`) on a real redis-server:
a worker that listens reads no version key until a version is announced (Redis's own
``INFO commandstats`` counts the GETs), finds what was published while it was not
listening, and without the right to subscribe or to announce still gets every version."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.league.records import Snapshot
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.acl import job_users, password_hash
from rolloutfleet.transport.redis.clients import worker_connections
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from rolloutfleet.transport.weights_news import WeightsNews
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
WEIGHTS = {"w": np.arange(6, dtype=np.float32)}


def job(**spec: Any) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "cartpole", "namespace": "team"},
                                 "spec": {"replicas": 1, "env": {"id": "CartPole-v1"}, **spec}})  # fmt: skip


def worker(url: str, spec_job: RolloutJob | None = None) -> WorkerTransport:
    return WorkerTransport(WorkerConfig(job=spec_job or job(), worker_index=0, num_workers=1, redis_url=url))


def gets(admin: redis.Redis) -> int:
    """GETs Redis ran since the last ``CONFIG RESETSTAT`` (its own count)."""
    return int(admin.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def until(condition: Callable[[], Any], timeout_s: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.01)
    return value


def test_a_listening_worker_reads_no_version_until_one_is_announced(redis_server: RedisServer, redis_url: str) -> None:
    admin = redis_server.client()
    transport = worker(redis_url)
    until(lambda: transport.poll_weights() == {} and transport.news.listening)
    admin.config_resetstat()
    for _ in range(50):  # fifty fragments with no new version
        assert transport.poll_weights() == {}
    assert gets(admin) == 0
    seq = WeightPublisher(redis_url, "cartpole", "team").publish(WEIGHTS)
    admin.config_resetstat()  # the publisher's own reads (its scripts') not counted
    update = until(lambda: transport.poll_weights().get("default"))
    assert update.seq_no == seq == 1
    np.testing.assert_array_equal(update.weights["w"], WEIGHTS["w"])
    assert gets(admin) == 2  # the version key once, then its one chunk
    for _ in range(20):
        assert transport.poll_weights(held={"default": 1}) == {}
    assert gets(admin) == 2 and transport.news.announcements == 1
    transport.close()


def test_a_worker_connection_count_is_its_publishers_and_one_for_the_news(own_redis: RedisServer) -> None:
    admin, redis_url = own_redis.client(), own_redis.url  # a server of its own: no other test's clients
    before = int(admin.info("clients")["connected_clients"])
    manifest = RolloutJob.from_file(ROOT / "examples/multiagent.yaml").to_dict()  # two policies, both trained
    multi = RolloutJob.from_dict({**manifest, "metadata": {"name": "tag", "namespace": "team"}})
    games = RolloutJob.from_file(ROOT / "examples/tictactoe.yaml").to_dict()  # main trained, main_v1 not
    games["spec"]["league"] = {"opponent": "main_v1", "publishOpponentRows": True}  # its rows too: one more
    league = RolloutJob.from_dict({**games, "metadata": {"name": "ttt", "namespace": "team"}})
    for spec_job, expected in ((job(), 2), (multi, 3), (league, 4)):
        transport = worker(redis_url, spec_job)
        until(lambda t=transport: t.poll_weights() == {} and t.news.listening)  # type: ignore[misc]
        store = None
        if spec_job.spec.league is not None:  # the league's store, on the worker's client as a worker makes it
            store = PolicyStore(redis_url, spec_job, client=transport.client)
            store.snapshot("s1", WEIGHTS)
            known: dict[str, Snapshot] = {}
            pending = store.send_ahead(["s1"], known)  # a load asks for the next picks' snapshots
            assert pending is not None and pending.receive() == {} and known  # metadata first
            assert store.get("s1") == known["s1"]  # the worker's own commands go on beside it
        assert int(admin.info("clients")["connected_clients"]) - before == worker_connections(spec_job) == expected
        if store is not None:
            store.close()
        transport.close()
        until(lambda: int(admin.info("clients")["connected_clients"]) == before)


def test_news_missed_while_not_listening_is_read_when_listening_again(own_redis: RedisServer) -> None:
    admin, url = own_redis.client(), own_redis.url
    transport = worker(url)
    until(lambda: transport.poll_weights() == {} and transport.news.listening)
    admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
    seq = WeightPublisher(url, "cartpole", "team").publish(WEIGHTS)  # announced to nobody
    assert until(lambda: transport.poll_weights().get("default")).seq_no == seq
    until(lambda: transport.poll_weights() == {} and transport.news.listening, timeout_s=10)
    assert transport.news.lost == 1
    seq = WeightPublisher(url, "cartpole", "team").publish(WEIGHTS)
    assert until(lambda: transport.poll_weights().get("default")).seq_no == seq == 2
    admin.config_resetstat()
    assert transport.poll_weights() == {} and gets(admin) == 0  # listening again: no read
    transport.close()


def test_every_policy_is_read_every_recheck_even_without_news(redis_server: RedisServer, redis_url: str) -> None:
    now = [0.0]
    client = redis_server.client()
    news = WeightsNews(client, {"default": job_keys("team", "cartpole").weights_news}, clock=lambda: now[0])
    until(lambda: news.due() == {"default"} and news.listening)
    until(lambda: news.due() == set() and news.due() == set())
    now[0] += 29.9
    assert news.due() == set()
    now[0] += 0.2
    assert news.due() == {"default"} and news.due() == set()
    news.close()


def test_users_without_the_channels_still_get_every_version(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    admin = own_redis.client()
    for user in ("plain-worker", "plain-learner"):  # an ACL of one's own: keys, but no channel
        admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">pw", "resetchannels", "~*", "+@all")
    url = f"redis://plain-learner:pw@127.0.0.1:{own_redis.port}/0"
    transport = worker(f"redis://plain-worker:pw@127.0.0.1:{own_redis.port}/0")
    with caplog.at_level(logging.WARNING):
        assert transport.poll_weights() == {}
        publisher = WeightPublisher(url, "cartpole", "team")
        assert [publisher.publish(WEIGHTS) for _ in range(2)] == [1, 2]
        assert transport.poll_weights()["default"].seq_no == 2  # read every call, as without news
    assert publisher.unannounced == 2 and transport.news.refused is not None
    lines = [r.getMessage() for r in caplog.records]
    assert sum("may not subscribe to rolloutfleet:{team/cartpole}:weights:news" in line for line in lines) == 1
    assert sum("may not publish to rolloutfleet:{team/cartpole}:weights:news" in line for line in lines) == 1
    admin.config_resetstat()
    assert transport.poll_weights() == {} and gets(admin) == 1
    transport.close()


def test_the_jobs_own_users_announce_and_listen_and_other_jobs_cannot(own_redis: RedisServer) -> None:
    admin = own_redis.client()
    users, other = job_users("team", "cartpole"), job_users("team", "other")
    for user in (users.worker, users.learner, other.worker):
        admin.execute_command("ACL", "SETUSER", *user.setuser_args([password_hash("pw")]))

    def url(name: str) -> str:
        return f"redis://{name.replace('/', '%2F')}:pw@127.0.0.1:{own_redis.port}/0"

    transport = worker(url(users.worker.name))
    until(lambda: transport.poll_weights() == {} and transport.news.listening)
    publisher = WeightPublisher(url(users.learner.name), "cartpole", "team")
    assert publisher.publish(WEIGHTS) == 1 and publisher.unannounced == 0
    assert until(lambda: transport.poll_weights().get("default")).seq_no == 1
    transport.publish(SampleBatch({"obs": np.zeros((2, 4), np.float32), "weights_seq_no": np.ones(2, np.int64)}))
    spy = redis.Redis.from_url(url(other.worker.name)).pubsub()
    spy.subscribe(job_keys("team", "cartpole").weights_news)
    with pytest.raises(redis.exceptions.NoPermissionError):
        spy.get_message(timeout=1.0)
    with pytest.raises(redis.exceptions.NoPermissionError):  # a worker cannot announce
        redis.Redis.from_url(url(users.worker.name)).publish(job_keys("team", "cartpole").weights_news, "9 1 1")
    transport.close()

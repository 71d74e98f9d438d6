"""Per-job Redis users (:mod:`rolloutfleet.transport.redis.acl`) on a real redis-server: the
worker user of job A publishes A's batches, heartbeats and filters and reads A's weights,
and Redis refuses it (NOPERM) B's keys, publishing weights, FLUSHALL, CONFIG and KEYS; A's
learner user consumes, acks, reclaims and publishes weights, and cannot read B."""

from __future__ import annotations

import time
import urllib.parse

import numpy as np
import pytest
import redis

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.fleet.worker_transport import WorkerTransport
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.global_step import GlobalStepPublisher
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.acl import JobUsers, job_users, password_hash
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

PASSWORD = "p/w#d?x@y%z: sp"  # every character a URL makes hard


def url_for(server: RedisServer, user: str, password: str = PASSWORD) -> str:
    quoted = urllib.parse.quote(user, safe=""), urllib.parse.quote(password, safe="")
    return f"redis://{quoted[0]}:{quoted[1]}@127.0.0.1:{server.port}/0"


def apply(admin: redis.Redis, users: JobUsers) -> None:
    for user in (users.worker, users.learner):
        admin.execute_command("ACL", "SETUSER", *user.setuser_args([password_hash(PASSWORD)]))


@pytest.fixture
def acl_redis(own_redis: RedisServer) -> tuple[RedisServer, JobUsers, JobUsers]:
    admin = own_redis.client()
    a, b = job_users("team-a", "cartpole"), job_users("team-b", "cartpole")  # same name, two namespaces
    apply(admin, a)
    apply(admin, b)
    return own_redis, a, b


def job(namespace: str) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "cartpole", "namespace": namespace},
                                 "spec": {"replicas": 1, "env": {"id": "CartPole-v1"},
                                          "sampling": {"observationFilter": "meanStd"}}})  # fmt: skip


def refused(call: object) -> str:
    """What Redis said refusing ``call``: redis-py raises NoPermissionError for a NOPERM reply."""
    with pytest.raises(redis.exceptions.NoPermissionError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value)


def test_a_worker_of_a_publishes_its_own_batches_and_nothing_else(
    acl_redis: tuple[RedisServer, JobUsers, JobUsers],
) -> None:
    server, a, _ = acl_redis
    learner_a = url_for(server, a.learner.name)
    WeightPublisher(learner_a, "cartpole", "team-a").publish({"w": np.ones(2)})
    GlobalStepPublisher(learner_a, "cartpole", "team-a").set_global_step(7)
    worker_url = url_for(server, a.worker.name)
    transport = WorkerTransport(WorkerConfig(job=job("team-a"), worker_index=0, num_workers=1, redis_url=worker_url))
    assert transport.poll_weights()["default"].seq_no == 1
    transport.publish(SampleBatch({"obs": np.zeros((3, 4), np.float32), "weights_seq_no": np.ones(3, np.int64)}))
    transport.heartbeat({"num_env_steps_sampled_lifetime": 3, "env_steps_per_s": 1.0, "weights_seq_no": 1})
    transport.close()
    [message] = BatchConsumer(learner_a, "cartpole", "team-a").read(timeout=5)
    assert message.metadata.env_steps == 3
    admin = server.client()
    assert admin.hlen(job_keys("team-a", "cartpole").heartbeats) == 1
    assert admin.acl_log() == []  # nothing the worker and learner did was refused, not even quietly

    worker = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0", username=a.worker.name, password=PASSWORD)
    b_keys, a_keys = job_keys("team-b", "cartpole"), job_keys("team-a", "cartpole")
    b_stream = b_keys.batches
    admin.xadd(b_stream, {"x": "1"})
    refusals = [
        refused(lambda: worker.xadd(b_stream, {"x": "poison"})),  # B's stream: append
        refused(lambda: worker.xrange(b_stream)),  # B's stream: read
        refused(lambda: worker.get(b_keys.weights_version)),  # B's weights
        refused(lambda: worker.set(a_keys.weights_version, "99 1 1")),  # publishing A's weights
        refused(lambda: worker.set(a_keys.weights_chunk(99, 0), b"x")),
        refused(lambda: worker.set(a_keys.global_step, "1")),
        refused(lambda: worker.xreadgroup("learner", "me", {a_keys.batches: ">"})),  # consuming is the learner's
        refused(lambda: worker.flushall()),
        refused(lambda: worker.config_get("*")),
        refused(lambda: worker.keys("*")),
        refused(lambda: worker.scan()),
        refused(lambda: worker.execute_command("ACL", "LIST")),
        refused(lambda: worker.client_list()),
        refused(lambda: worker.execute_command("CLIENT", "KILL", "TYPE", "normal")),
        refused(lambda: worker.eval("return redis.call('SET', KEYS[1], 'x')", 1, a_keys.weights_version)),
    ]
    assert all("no permissions" in line for line in refusals), refusals
    assert admin.xlen(b_stream) == 1 and admin.get(a_keys.weights_version).startswith(b"1 ")
    assert admin.get(a_keys.global_step) == b"7"


def test_the_learner_of_a_consumes_acks_reclaims_and_publishes_but_cannot_read_b(
    acl_redis: tuple[RedisServer, JobUsers, JobUsers],
) -> None:
    server, a, b = acl_redis
    worker_url = url_for(server, a.worker.name)
    transport = WorkerTransport(WorkerConfig(job=job("team-a"), worker_index=0, num_workers=1, redis_url=worker_url))
    for _ in range(2):
        transport.publish(SampleBatch({"obs": np.zeros((2, 4), np.float32)}))
    transport.close()
    learner_url = url_for(server, a.learner.name)
    first = BatchConsumer(learner_url, "cartpole", "team-a", consumer="one")
    [taken, _] = first.read(count=2, timeout=5)  # read, never acked: "one" died holding them
    taken.ack()
    time.sleep(0.1)  # "one"'s entry idles past reclaim_idle_s
    reclaimer = BatchConsumer(learner_url, "cartpole", "team-a", consumer="two", reclaim_idle_s=0.05)
    reclaimed = reclaimer.read(count=2, timeout=5)
    assert len(reclaimed) == 1  # the unacked one, claimed from "one"
    reclaimed[0].ack()
    assert server.client().xpending(job_keys("team-a", "cartpole").batches, "learner")["pending"] == 0
    assert WeightPublisher(learner_url, "cartpole", "team-a").publish({"w": np.zeros(3)}) == 1
    unread = BatchConsumer(learner_url, "cartpole", "team-a", group="recorder-start-failed")
    assert unread.release_unread_groups() == [job_keys("team-a", "cartpole").batches]  # as record does
    assert server.client().acl_log() == []

    learner = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0", username=a.learner.name, password=PASSWORD)
    b_keys = job_keys("team-b", "cartpole")
    server.client().xadd(b_keys.batches, {"x": "1"})
    for call in (lambda: learner.xrange(b_keys.batches), lambda: learner.get(b_keys.weights_version),
                 lambda: learner.set(b_keys.weights_version, "1 1 1"), lambda: learner.flushall(),
                 lambda: learner.keys("*"), lambda: learner.config_get("*"),
                 lambda: learner.xgroup_destroy(b_keys.batches, "learner")):  # fmt: skip
        refused(call)
    b_learner = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0", username=b.learner.name, password=PASSWORD)
    assert b_learner.xlen(b_keys.batches) == 1  # B's own learner reads B


def test_a_wrong_password_is_refused_and_the_error_never_shows_it(
    acl_redis: tuple[RedisServer, JobUsers, JobUsers],
) -> None:
    server, a, _ = acl_redis
    from rolloutfleet.transport.redis.connection import connect, failure_line

    wrong = "not/the#right?one@%25"
    with pytest.raises(redis.AuthenticationError) as caught:
        connect(url_for(server, a.worker.name, urllib.parse.unquote(wrong)))
    line = failure_line(caught.value, "here")
    assert "not/the" not in line and "not/the" not in str(caught.value) and PASSWORD not in line


def test_a_worker_user_sees_a_learner_reading_with_its_own_code(
    acl_redis: tuple[RedisServer, JobUsers, JobUsers],
) -> None:
    """A learner that reads with plain XREADGROUP (no BatchConsumer, so no stamp in the
    ``learners`` hash) is seen by its idle time in XINFO CONSUMERS, which the worker user
    may run: the fleet it drained gets room, it is named as the group holding the stream,
    and Redis refused nothing (without the permission: the worker waits for a learner)."""
    server, a, _ = acl_redis
    batch = SampleBatch({"obs": np.zeros((3, 4), np.float32)})
    publisher = BatchPublisher(
        url_for(server, a.worker.name), "cartpole", "team-a", max_len=4, backpressure="block", block_timeout_s=5
    )
    for _ in range(4):
        publisher.publish(batch)
    own_code = redis.Redis.from_url(url_for(server, a.learner.name))
    stream = job_keys("team-a", "cartpole").batches
    own_code.xgroup_create(stream, "own-code", id="0")
    entries = [entry_id for _, items in own_code.xreadgroup("own-code", "me", {stream: ">"}) for entry_id, _ in items]
    assert len(entries) == 4 and own_code.xack(stream, "own-code", *entries) == 4
    publisher.publish(batch)  # room: the group consumed all four
    load = publisher.load()
    assert (load.group, load.unconsumed) == ("own-code", 1)
    publisher.close()
    assert server.client().acl_log() == []


def test_a_worker_user_waits_on_its_jobs_room_signal_and_cannot_raise_it(
    acl_redis: tuple[RedisServer, JobUsers, JobUsers],
) -> None:
    """A waiting worker blocks on its job's room signal (XREAD) as its ACL user; the learner's
    ack raises it; the worker may not raise it itself, nor read another job's."""
    import threading

    server, a, _ = acl_redis
    consumer = BatchConsumer(url_for(server, a.learner.name), "cartpole", "team-a")
    consumer.ack(consumer.read(count=1, timeout=0))  # the group reads: it holds the fleet back
    publisher = BatchPublisher(url_for(server, a.worker.name), "cartpole", "team-a", max_len=1, block_timeout_s=30)
    publisher.publish({"obs": np.zeros((3, 4), np.float32)})
    learner = threading.Timer(1.0, lambda: consumer.ack(consumer.read(count=1, timeout=5)))
    learner.start()
    publisher.publish({"obs": np.zeros((3, 4), np.float32)})  # waits, then the ack's signal lets it in
    learner.join()
    assert publisher.stats.blocked == 1 and publisher.meter.signalled
    admin = server.client()
    assert admin.acl_log() == []  # the wait's XREAD and every measurement were the worker's to make
    worker = redis.Redis.from_url(f"redis://127.0.0.1:{server.port}/0", username=a.worker.name, password=PASSWORD)
    a_keys, b_keys = job_keys("team-a", "cartpole"), job_keys("team-b", "cartpole")
    refusals = [
        refused(lambda: worker.xadd(a_keys.room, {"room": 1})),  # raising it is the learner's
        refused(lambda: worker.xread({b_keys.room: "0"})),  # another job's
    ]
    assert all("no permissions" in line for line in refusals), refusals
    publisher.close()
    consumer.close()

"""Bad input to ``consume`` and ``streams`` (issue 13, "Bad input"): garbage in the stream, an
unknown consumer group, ``--count 0``, a Redis that refuses writes or is not there, a key
that is not a stream. Each: one clear line, nothing lost, no hang."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.cli.cli_kit import run_cli
from tests.integration.redis_server import RedisServer, redis_server_binary

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "cartpole")


def consume(url: str, output: Path, *extra: str) -> int:
    return run_cli("consume", "--redis", url, "--job", "cartpole", "--output", str(output), *extra)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def batch(value: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((2, 2), value, np.float32)}


def test_garbage_in_the_stream_is_skipped_and_left_for_the_dead_letters(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    BatchConsumer(redis_url, "cartpole")  # the learner's group, before anything is published
    client = redis.Redis.from_url(redis_url)
    publisher.publish(batch(0))
    client.xadd(KEYS.batches, {"junk": "not a batch"})
    client.xadd(KEYS.batches, {"payload": b"\x00" * 64, "worker_index": 0, "weights_seq_no": 0, "env_steps": 2,
                               "created_at": 0})  # fmt: skip
    publisher.publish(batch(1))
    publisher.publish({"obs": np.zeros((2, 5), np.float32)})  # decodes, but cannot join the others
    publisher.publish(batch(2))
    look = tmp_path / "look.npz"
    assert consume(redis_url, look, "--count", "3") == 0
    assert "2 undecodable entries skipped" in one_line(capsys.readouterr().out)
    learner = tmp_path / "learner.npz"
    assert consume(redis_url, learner, "--count", "3", "--group", "learner", "--timeout", "5") == 0
    line = one_line(capsys.readouterr().out)
    assert "2 undecodable entries left for the dead letters" in line and "left pending" in line, line
    with np.load(learner, allow_pickle=False) as data:
        assert data["obs"][:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    assert client.xpending(KEYS.batches, "learner")["pending"] == 3  # not lost: the learner's to judge


def test_an_unknown_group_is_said_in_one_line_and_reads_from_the_oldest_entry(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    BatchConsumer(redis_url, "cartpole")  # group "learner"
    BatchPublisher(redis_url, "cartpole").publish(batch(0))
    assert consume(redis_url, tmp_path / "x.npz", "--count", "1", "--group", "lerner") == 0
    line = one_line(capsys.readouterr().err)
    assert "'lerner' did not exist" in line and "its groups: learner" in line, line
    client = redis.Redis.from_url(redis_url)
    assert client.xinfo_groups(KEYS.batches)[0]["lag"] == 1  # the learner's group still has its batch
    assert consume(redis_url, tmp_path / "y.npz", "--count", "1", "--group", "learner") == 0
    assert capsys.readouterr().err == ""  # an existing group: nothing to say


@pytest.mark.parametrize("count", ["0", "-3"])
def test_a_count_below_one_is_one_line(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], count: str
) -> None:
    assert consume(redis_url, tmp_path / "x.npz", "--count", count) == 2
    assert f"--count must be >= 1, got {count}" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "x.npz").exists()


@pytest.fixture
def full_redis() -> Iterator[RedisServer]:
    server = RedisServer(executable=redis_server_binary(), maxmemory="4mb")
    server.start()
    yield server
    server.close()


def fill(server: RedisServer) -> int:
    publisher = BatchPublisher(server.url, "cartpole", max_len=100_000, backpressure="block", block_timeout_s=0.5)
    try:
        while True:
            publisher.publish({"obs": np.zeros((5000, 2), np.float32)})
    except redis.ConnectionError:
        raise
    except TimeoutError:
        return publisher.stats.published


def test_a_redis_that_refuses_writes(
    full_redis: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Out of memory: the learner's group still reads (and its reads let workers trim); a
    group that would have to be created fails in one line within --timeout."""
    BatchConsumer(full_redis.url, "cartpole")
    published = fill(full_redis)
    assert published > 10
    assert consume(full_redis.url, tmp_path / "a.npz", "--count", "3", "--group", "learner") == 0
    capsys.readouterr()
    assert consume(full_redis.url, tmp_path / "b.npz", "--count", "3", "--group", "audit", "--timeout", "2") == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "out of memory" in line and "maxmemory" in line, line
    assert full_redis.client().xlen(KEYS.batches) == published  # nothing lost


def test_a_key_that_is_not_a_stream(redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    redis.Redis.from_url(redis_url).set(KEYS.batches, "hello")
    assert consume(redis_url, tmp_path / "x.npz", "--count", "1", "--timeout", "1") == 1
    assert "holds a string, not a stream" in one_line(capsys.readouterr().err)
    assert consume(redis_url, tmp_path / "x.npz", "--count", "1", "--group", "learner", "--timeout", "1") == 1
    assert "holds a string, not a stream" in one_line(capsys.readouterr().err)


def test_no_redis_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert consume(url, tmp_path / "x.npz", "--count", "1", "--timeout", "1") == 1
    line = one_line(capsys.readouterr().err)
    assert line.endswith(f"redis at {url[8:-2]}: connection refused (tried for 1 s)"), line
    assert run_cli("streams", "--redis", url, "--timeout", "1") == 1
    assert "connection refused" in one_line(capsys.readouterr().err)

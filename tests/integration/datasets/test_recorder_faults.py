"""The recorder and its command when the output fails or is someone else's: one line,
nothing acknowledged that was not written."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from rolloutfleet.cli.main import main
from rolloutfleet.datasets.durable import OutputError
from rolloutfleet.datasets.parquet_files import read_columns
from rolloutfleet.datasets.recorder import Recorder
from rolloutfleet.datasets.writer import DatasetWriter
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.datasets.fleet_kit import cartpole_job

pytestmark = pytest.mark.integration


def publish(redis_url: str, name: str, count: int) -> int:
    """``count`` batches of a real EnvRunner into job ``name``'s stream; returns the rows."""
    runner = EnvRunner(cartpole_job(name))
    publisher = BatchPublisher(redis_url, name, backpressure="dropOldest", max_len=1000)
    rows = 0
    for _ in range(count):
        batch = runner.sample()
        publisher.publish(batch)
        rows += len(batch)
    publisher.close()
    runner.close()
    return rows


def test_a_full_disk_acknowledges_nothing_and_a_restart_records_everything(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(redis_url, "full", DatasetWriter(tmp_path, "full", "parquet"), reclaim_s=0.5)
    rows = publish(redis_url, "full", 5)
    real_fsync = os.fsync

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OutputError, match="No space left on device"):
        recorder.step(timeout=5.0)
    monkeypatch.setattr(os, "fsync", real_fsync)
    client = redis.Redis.from_url(redis_url)
    assert client.xpending(job_keys("default", "full").batches, "recorder")["pending"] == 5  # none acknowledged
    assert not list((tmp_path / ".spool").iterdir())  # no half-written segment
    recorder.close()

    again = Recorder(redis_url, "full", DatasetWriter(tmp_path, "full", "parquet"), reclaim_s=0.5)
    deadline = time.monotonic() + 30
    while again.stats.rows < rows:
        assert time.monotonic() < deadline, again.stats
        again.step(timeout=0.5)
    again.flush()
    again.close()
    assert len(read_columns(tmp_path)["t"]) == rows
    assert client.xpending(job_keys("default", "full").batches, "recorder")["pending"] == 0


def run(*argv: str) -> int:
    return main(list(argv))


def test_the_command_refuses_another_jobs_folder_in_one_line(redis_url: str, tmp_path: Path, capsys: Any) -> None:
    DatasetWriter(tmp_path, "cartpole", "parquet").close()
    code = run("record", "--job", "pong", "--redis", redis_url, "--format", "parquet", "--output", str(tmp_path),
               "--duration", "1")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "holds the parquet recording of job default/cartpole" in err


def test_minari_needs_the_manifest_and_a_single_agent_job(redis_url: str, tmp_path: Path, capsys: Any) -> None:
    code = run("record", "--job", "cartpole", "--redis", redis_url, "--format", "minari", "--output", str(tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--job must be the job's manifest" in err


def test_an_unwritable_output_is_one_line(redis_url: str, tmp_path: Path, capsys: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code = run(
        "record", "--job", "cartpole", "--redis", redis_url, "--format", "parquet", "--output", str(blocker / "out")
    )
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "cannot create" in err


TEAM_TAG = Path(__file__).resolve().parents[3] / "examples" / "multiagent.yaml"
"""Job team-tag, policies blue and red, as a user has it."""


def recorder_groups(client: redis.Redis, policy: str) -> list[str]:
    stream = job_keys("default", "team-tag", policy).batches
    if not client.exists(stream):
        return []
    return [g["name"].decode() for g in client.xinfo_groups(stream) if g["name"].decode().startswith("recorder")]


def test_a_policy_folder_that_cannot_be_written_leaves_no_group_behind(
    redis_url: str, tmp_path: Path, capsys: Any
) -> None:
    (tmp_path / "red").write_text("in the way")  # blue's folder is fine, red's cannot be made
    code = run("record", "--job", str(TEAM_TAG), "--redis", redis_url, "--format", "parquet",
               "--output", str(tmp_path), "--duration", "1")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "red" in err
    client = redis.Redis.from_url(redis_url)
    assert recorder_groups(client, "blue") == [] and recorder_groups(client, "red") == []


def test_a_stream_refused_at_start_releases_the_groups_already_made(
    redis_url: str, tmp_path: Path, capsys: Any
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(job_keys("default", "team-tag", "red").batches, "not a stream")
    code = run("record", "--job", str(TEAM_TAG), "--redis", redis_url, "--format", "parquet",
               "--output", str(tmp_path), "--duration", "1")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "holds a string, not a stream" in err
    assert recorder_groups(client, "blue") == []  # made for blue, then released when red was refused


def test_only_a_group_that_handed_out_nothing_is_released(redis_url: str) -> None:
    publish(redis_url, "kept", 2)
    client = redis.Redis.from_url(redis_url)
    stream = job_keys("default", "kept").batches

    read = BatchConsumer(redis_url, "kept", group="read-some", block_s=0.1)
    assert read.read(count=1, timeout=2.0)
    unread = BatchConsumer(redis_url, "kept", group="read-none", block_s=0.1)
    client.xgroup_create(stream, "theirs", id="0")
    other = BatchConsumer(redis_url, "kept", group="theirs", block_s=0.1)  # it existed: not this consumer's
    assert read.release_unread_groups() == []
    assert unread.release_unread_groups() == [stream]
    assert other.release_unread_groups() == []
    assert {g["name"].decode() for g in client.xinfo_groups(stream)} == {"read-some", "theirs"}
    for consumer in (read, unread, other):
        consumer.close()

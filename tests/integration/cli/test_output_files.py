"""``consume --output``: the path reported is the path written, and a full disk (a real
64 KiB tmpfs) is one line, leaves no partial file, and acknowledges only what is on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests import disk_kit
from tests.integration.cli.cli_kit import run_cli

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "files")


def consume(url: str, output: Path, *extra: str) -> int:
    return run_cli("consume", "--redis", url, "--job", "files", "--output", str(output), "--timeout", "5", *extra)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("group", [None, "learner"])
def test_an_output_without_npz_reports_the_file_numpy_writes(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], group: str | None
) -> None:
    BatchPublisher(redis_url, "files").publish({"obs": np.arange(4, dtype=np.float32).reshape(2, 2)})
    assert consume(redis_url, tmp_path / "noext", "--count", "1", *(["--group", group] if group else [])) == 0
    line = one_line(capsys.readouterr().out)
    assert line.split(" to ")[1].split(",")[0] == str(tmp_path / "noext.npz"), line
    with np.load(tmp_path / "noext.npz", allow_pickle=False) as data:
        assert data["obs"].tolist() == [[0, 1], [2, 3]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext.npz"]  # no spool, no temporary


def test_a_full_disk_acknowledges_only_the_batches_on_disk(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    BatchConsumer(redis_url, "files", group="learner")  # the group exists before the batches
    publisher = BatchPublisher(redis_url, "files")
    for value in range(8):
        publisher.publish({"obs": np.random.default_rng(value).random((1000, 3))})  # ~24 KB, incompressible
    client = redis.Redis.from_url(redis_url)
    with disk_kit.tiny_disk(tmp_path) as disk:
        code = consume(redis_url, disk / "out.npz", "--count", "8", "--group", "learner")
        line = one_line(capsys.readouterr().err)
        assert code == 1 and "No space left on device" in line and "Traceback" not in line, line
        assert not (disk / "out.npz").exists()
        spools = [p for p in disk.iterdir() if p.is_dir()]
        saved = sorted(p for spool in spools for p in spool.iterdir())
        assert all(p.suffix == ".npz" for p in saved), saved  # no .partial left behind
        for part in saved:
            with np.load(part, allow_pickle=False) as data:
                assert data["obs"].shape == (1000, 3)  # whole
        pending = client.xpending(KEYS.batches, "learner")["pending"]
        acked = 8 - pending - int(client.xinfo_groups(KEYS.batches)[0]["lag"] or 0)
        assert acked == len(saved) < 8, (acked, len(saved), line)
        assert f"the {len(saved)} batches saved before are in" in line if saved else "nothing saved" in line
    # Nothing lost: what was not acknowledged is reclaimed by the group's next consumer.
    learner = BatchConsumer(redis_url, "files", group="learner", consumer="next", reclaim_idle_s=0.2)
    rest: list[object] = []
    while len(rest) < 8 - len(saved):
        rest += learner.read(count=8, timeout=5)
    assert len(rest) == 8 - len(saved)


def test_a_full_disk_while_only_looking_is_one_line_and_takes_nothing(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publisher = BatchPublisher(redis_url, "files")
    for value in range(4):
        publisher.publish({"obs": np.random.default_rng(value).random((1000, 3))})
    with disk_kit.tiny_disk(tmp_path) as disk:
        assert consume(redis_url, disk / "look.npz", "--count", "4") == 1
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"rolloutfleet consume: cannot write {disk / 'look.npz'}: No space left on device")
        assert list(disk.iterdir()) == []
    assert redis.Redis.from_url(redis_url).xlen(KEYS.batches) == 4  # looking takes nothing away

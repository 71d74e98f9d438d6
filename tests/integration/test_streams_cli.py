"""``consume`` and ``streams`` as the CLI runs them (argparse -> run function)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from rolloutfleet.publisher import BatchPublisher
from rolloutfleet.streams_cli import add_consume_parser, add_streams_parser

pytestmark = pytest.mark.integration


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    add_consume_parser(commands)
    add_streams_parser(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))


def test_consume_saves_columns_with_per_row_metadata(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole", "team")
    for worker in range(3):
        publisher.publish({"obs": np.full((worker + 1, 2), worker, np.float32)}, weights_seq_no=10 + worker,
                          worker_index=worker)  # fmt: skip
    output = tmp_path / "out.npz"
    assert run("consume", "--redis", redis_url, "--job", "cartpole", "--namespace", "team", "--count", "3",
               "--output", str(output)) == 0  # fmt: skip
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"].shape == (6, 2)
        assert data["worker_index"].tolist() == [0, 1, 1, 2, 2, 2]
        assert data["weights_seq_no"].tolist() == [10, 11, 11, 12, 12, 12]


def test_consume_saves_each_rows_own_weights_version(redis_url: str, tmp_path: Path) -> None:
    publisher = BatchPublisher(redis_url, "cartpole")
    publisher.publish({"obs": np.zeros((3, 2), np.float32), "weights_seq_no": np.array([3, 7, 7])})
    output = tmp_path / "out.npz"
    assert run("consume", "--redis", redis_url, "--job", "cartpole", "--count", "1", "--output", str(output)) == 0
    with np.load(output, allow_pickle=False) as data:
        assert data["weights_seq_no"].tolist() == [3, 7, 7]  # not the entry's newest version on every row


def test_consume_gives_up_without_enough_batches(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run("consume", "--redis", redis_url, "--job", "idle", "--count", "1", "--output", str(tmp_path / "x.npz"),
               "--timeout", "0.2")  # fmt: skip
    assert code == 1 and "0 of 1 batches" in capsys.readouterr().err


def test_streams_lists_every_job(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps cells to the terminal width
    BatchPublisher(redis_url, "cartpole", "team").publish({"obs": np.zeros(2)})
    BatchPublisher(redis_url, "pong", "default").publish({"obs": np.zeros(2)})
    for policy in ("red", "blue"):  # a multi-agent job: one stream per policy
        BatchPublisher(redis_url, "tag", "default", policy=policy).publish({"obs": np.zeros(2)})
    run("consume", "--redis", redis_url, "--job", "pong", "--count", "1", "--output", "/dev/null", "--timeout", "5")
    run("consume", "--redis", redis_url, "--job", "tag", "--policy", "red", "--count", "1", "--output", "/dev/null",
        "--group", "red-learner", "--timeout", "5")  # fmt: skip
    capsys.readouterr()
    assert run("streams", "--redis", redis_url) == 0
    out = capsys.readouterr().out
    assert "team/cartpole" in out and "default/pong" in out and "learner" in out
    assert "default/tag (blue)" in out and "default/tag (red)" in out and "red-learner" in out

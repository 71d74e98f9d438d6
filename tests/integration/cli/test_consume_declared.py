"""`rolloutfleet consume` judges batches against the job's declared columns (what its workers
declare before their first batch), not against the first batch it happens to read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.declared_columns import declare
from rolloutfleet.transport.entries import schema_of
from rolloutfleet.transport.publisher import BatchPublisher
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.cli.cli_kit import run_cli

pytestmark = pytest.mark.integration
KEYS = job_keys("default", "cartpole")


def good(value: int) -> dict[str, np.ndarray]:
    return {"obs": np.full((2, 4), value, np.float32)}


ODD = {"obs": np.full((2, 5), -1, np.float32)}


def publish(url: str, *batches: dict[str, np.ndarray], declared: bool) -> None:
    if declared:  # as each worker does before its first batch
        declare(redis.Redis.from_url(url), KEYS, schema_of(good(0)))
    publisher = BatchPublisher(url, "cartpole")
    for batch in batches:
        publisher.publish(batch)


def consume(url: str, output: Path, *extra: str) -> int:
    return run_cli("consume", "--redis", url, "--job", "cartpole", "--output", str(output), "--timeout", "2", *extra)


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "nothing-declared"])
def test_a_look_is_not_led_by_an_odd_first_batch(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], declared: bool
) -> None:
    publish(redis_url, ODD, good(1), good(2), good(3), declared=declared)
    output = tmp_path / "look.npz"
    assert consume(redis_url, output, "--count", "3") == 0, capsys.readouterr().err
    line = capsys.readouterr().out.strip()
    against = "the declared columns" if declared else "most batches read"
    assert f"skipped, unlike {against}: " in line and "(5,)" in line, line
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"].shape == (6, 4) and sorted(set(data["obs"][:, 0].tolist())) == [1, 2, 3]


def test_a_look_follows_the_declaration_even_against_most_batches(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(redis_url, ODD, ODD, ODD, good(1), declared=True)
    output = tmp_path / "look.npz"
    assert consume(redis_url, output, "--count", "1") == 0, capsys.readouterr().err
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"][:, 0].tolist() == [1, 1]


def test_a_group_saves_the_declared_batches_and_leaves_the_odd_one_pending(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    BatchConsumer(redis_url, "cartpole", group="learner")  # the group, before anything is published
    publish(redis_url, ODD, good(1), good(2), declared=True)
    output = tmp_path / "group.npz"
    assert consume(redis_url, output, "--count", "2", "--group", "learner") == 0, capsys.readouterr().err
    line = capsys.readouterr().out.strip()
    assert "left pending, unlike the declared columns: " in line, line
    with np.load(output, allow_pickle=False) as data:
        assert data["obs"][:, 0].tolist() == [1, 1, 2, 2]
    pending = redis.Redis.from_url(redis_url).xpending(KEYS.batches, "learner")
    assert pending["pending"] == 1  # the odd one, for the group's learner to judge

"""``rolloutfleet replay``: a recording (Parquet, Minari) published into a fresh job's stream
under ``block`` backpressure; a learner's BatchConsumer reads every row once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rolloutfleet.cli.main import main
from rolloutfleet.datasets.writer import DatasetWriter
from rolloutfleet.sampling.env_runner import EnvRunner
from rolloutfleet.transport.consumer import BatchConsumer
from tests.integration.datasets.fleet_kit import cartpole_job

pytestmark = pytest.mark.integration


def manifest(tmp_path: Path, name: str, env_id: str = "CartPole-v1") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(json.dumps({"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": name},
                                "spec": {"env": {"id": env_id}, "redis": {"maxLen": 4, "backpressure": "block"}}}))  # fmt: skip
    return path


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same CartPole batches recorded as Parquet and as Minari (no Redis needed)."""
    root = tmp_path_factory.mktemp("recordings")
    env = gym.make("CartPole-v1")
    runner = EnvRunner(cartpole_job("source"))
    writers = [DatasetWriter(root / "parquet", "source", "parquet", roll_bytes=30_000),
               DatasetWriter(root / "minari", "source", "minari", spaces=(env.observation_space, env.action_space))]  # fmt: skip
    for _ in range(12):
        batch = dict(runner.sample())
        for writer in writers:
            writer.write(batch)
    for writer in writers:
        writer.close()
    runner.close()
    return {"parquet": root / "parquet", "minari": root / "minari"}


def replay_and_read(redis_url: str, job: Path, dataset: Path, expected_rows: int) -> tuple[int, dict[str, np.ndarray]]:
    consumer = BatchConsumer(redis_url, "fresh", block_s=0.2)  # the learner, there before the replay
    outcome: dict[str, int] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("code", main(["replay", str(dataset), "--job", str(job),
                                                                              "--redis", redis_url, "--batch-rows", "100"])))  # fmt: skip
    thread.start()
    batches = []
    deadline = time.monotonic() + 120
    while sum(len(b["t"]) for b in batches) < expected_rows and time.monotonic() < deadline:
        batch = consumer.get(min_steps=1, timeout=0.5)
        if batch is not None:
            batches.append(dict(batch))
    thread.join(60)
    assert consumer.get(min_steps=1, timeout=1.0) is None  # nothing more than the dataset
    consumer.close()
    return outcome["code"], {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


def test_a_parquet_recording_replayed_is_read_once_row_for_row(redis_url: str, tmp_path: Path,
                                                               recordings: dict[str, Path]) -> None:  # fmt: skip
    from rolloutfleet.datasets.parquet_files import read_columns

    recorded = read_columns(recordings["parquet"])
    code, read = replay_and_read(redis_url, manifest(tmp_path, "fresh"), recordings["parquet"], len(recorded["t"]))
    assert code == 0
    assert len(read["t"]) == len(recorded["t"])
    keys = sorted(zip(read["eps_id"].tolist(), read["t"].tolist(), strict=True))
    assert keys == sorted(zip(recorded["eps_id"].tolist(), recorded["t"].tolist(), strict=True))
    order = np.lexsort((read["t"], read["eps_id"]))
    recorded_order = np.lexsort((recorded["t"], recorded["eps_id"]))
    for name in ("obs", "new_obs", "actions", "rewards", "action_dist_inputs", "weights_seq_no"):
        np.testing.assert_array_equal(read[name][order], recorded[name][recorded_order], err_msg=name)


def test_a_minari_recording_replayed_gives_each_episode_once(redis_url: str, tmp_path: Path,
                                                             recordings: dict[str, Path]) -> None:  # fmt: skip
    from minari.dataset.minari_dataset import MinariDataset

    dataset = MinariDataset(recordings["minari"] / "source-v0" / "data")
    code, read = replay_and_read(redis_url, manifest(tmp_path, "fresh"), recordings["minari"], dataset.total_steps)
    assert code == 0
    assert len(read["t"]) == dataset.total_steps
    for episode, metadata in zip(dataset.iterate_episodes(), dataset.storage.get_episode_metadata(range(dataset.total_episodes)), strict=True):  # fmt: skip
        rows = np.flatnonzero(read["eps_id"] == metadata["eps_id"])
        rows = rows[np.argsort(read["t"][rows])]
        assert read["t"][rows].tolist() == list(range(len(episode.actions)))
        np.testing.assert_array_equal(read["obs"][rows], episode.observations[:-1])
        np.testing.assert_array_equal(read["new_obs"][rows], episode.observations[1:])
        np.testing.assert_array_equal(read["actions"][rows], episode.actions)


@pytest.mark.parametrize("fmt", ["parquet", "minari"])
def test_a_dataset_of_other_spaces_is_refused_naming_the_column(redis_url: str, tmp_path: Path, fmt: str,
                                                                recordings: dict[str, Path], capsys: Any) -> None:  # fmt: skip
    code = main(
        ["replay", str(recordings[fmt]), "--job", str(manifest(tmp_path, "acro", "Acrobot-v1")), "--redis", redis_url]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "column 'obs'" in err and "(4,)" in err and "(6,)" in err


def test_a_replay_with_no_learner_says_it_waits_for_one_and_stops_on_a_signal(
    redis_url: str, tmp_path: Path, recordings: dict[str, Path]
) -> None:
    """maxLen 4 fills at once; with no consumer group the replay waits, and says so within seconds."""
    import os
    import signal
    import subprocess
    import sys

    argv = [sys.executable, "-m", "rolloutfleet.cli.main", "replay", str(recordings["parquet"]),
            "--job", str(manifest(tmp_path, "nobody")), "--redis", redis_url, "--batch-rows", "100"]  # fmt: skip
    started = time.monotonic()
    replaying = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=os.environ)
    assert replaying.stderr is not None
    line = replaying.stderr.readline()
    said_after = time.monotonic() - started
    replaying.send_signal(signal.SIGINT)
    _, rest = replaying.communicate(timeout=60)
    assert line.startswith("replay: waiting for a learner to read rolloutfleet:{default/nobody}:batches"), line + rest
    assert said_after < 20  # a second into the wait (the interpreter's start and the first batches before it)
    assert replaying.returncode == 130 and "stopped while waiting for a learner" in rest, rest

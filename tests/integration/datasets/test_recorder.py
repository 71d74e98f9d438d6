"""A CartPole fleet (real worker processes) recorded into Minari and Parquet at once, judged
against every row the fleet published (read by a group of the test's own) and against
gymnasium's CartPole equations."""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rolloutfleet.datasets.parquet_files import read_columns
from rolloutfleet.datasets.recorder import Recorder
from rolloutfleet.datasets.stitching import stitch
from rolloutfleet.datasets.writer import DatasetWriter
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message, concat_messages
from tests.integration.datasets.fleet_kit import cartpole_job, resimulation_error, start_workers, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def drained(consumer: BatchConsumer) -> bool:
    lag = consumer.lag()
    return lag.pending == 0 and lag.undelivered == 0


def test_a_fleet_recorded_as_minari_and_parquet(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = cartpole_job("rec")
    env = gym.make("CartPole-v1")
    truth = BatchConsumer(redis_url, "rec", group="truth", block_s=0.2)
    minari_writer = DatasetWriter(tmp_path / "minari", "rec", "minari", spaces=(env.observation_space, env.action_space),
                                  env_spec=env.spec)  # fmt: skip
    parquet_writer = DatasetWriter(tmp_path / "parquet", "rec", "parquet", roll_bytes=40_000)
    recorders = [Recorder(redis_url, "rec", writer, group=f"rec-{writer.state.format}", flush_s=1.0)
                 for writer in (minari_writer, parquet_writer)]  # fmt: skip
    seen: list[Message] = []
    workers = start_workers(job, redis_url, tmp_path)
    try:
        deadline = time.monotonic() + 240
        while len(seen) < 80:
            assert time.monotonic() < deadline, f"only {len(seen)} batches published"
            got = truth.read(timeout=0.2)
            truth.ack(got)
            seen += got
            for recorder in recorders:
                recorder.step(timeout=0.1)
    finally:
        stop(workers)
    deadline = time.monotonic() + 60
    while not all(drained(c) for c in (truth, *(r.consumer for r in recorders))):
        assert time.monotonic() < deadline, "the recorders did not read the stream to its end"
        got = truth.read(timeout=0.1)
        truth.ack(got)
        seen += got
        for recorder in recorders:
            recorder.step(timeout=0.1)
    for recorder in recorders:
        recorder.flush()
        recorder.close()

    published = concat_messages(seen)
    complete, broken, still_open = stitch(published)
    assert not broken and len(complete) > 50

    # Minari: loaded by minari itself, every complete episode once, N+1 observations, physics.
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    dataset = minari.load_dataset("rec-v0")
    assert dataset.total_episodes == len(complete)
    assert dataset.total_steps == sum(len(e) for e in complete)
    assert dataset.observation_space == env.observation_space and dataset.action_space == env.action_space
    assert dataset.recover_environment().spec.id == "CartPole-v1"
    recorded = {int(m["eps_id"]): m["id"] for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))}
    assert set(recorded) == {e.eps_id for e in complete}
    by_id = {e.eps_id: e for e in complete}
    for episode in dataset.iterate_episodes():
        eps_id = next(k for k, v in recorded.items() if v == episode.id)
        source = by_id[eps_id]
        assert len(episode.observations) == len(episode.actions) + 1 == len(source) + 1
        np.testing.assert_array_equal(episode.actions, source.columns["actions"])
        np.testing.assert_array_equal(episode.observations[:-1], source.columns["obs"])
        assert resimulation_error(episode.observations, episode.actions, episode.terminations) < 1e-5
        assert episode.terminations[-1] or (episode.truncations[-1] and len(episode.actions) == 500)
    assert len(dataset.sample_episodes(5)) == 5
    from minari.cli import app
    from typer.testing import CliRunner

    shown = CliRunner().invoke(app, ["show", "rec-v0"])
    assert shown.exit_code == 0 and "CartPole-v1" in shown.output, shown.output
    assert minari_writer.open_rows() == len(still_open["t"])

    # Parquet: every published row once, shapes intact, several files.
    files = sorted((tmp_path / "parquet").glob("part-*.parquet"))
    assert len(files) >= 2
    tensor = pq.read_table(files[0]).schema.field("obs").type
    assert isinstance(tensor, pa.FixedShapeTensorType) and list(tensor.shape) == [4]
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "ZSTD"
    rows = read_columns(tmp_path / "parquet")
    assert rows["obs"].shape == (len(published["t"]), 4) and rows["action_dist_inputs"].shape[1:] == (2,)
    keys = set(zip(rows["eps_id"].tolist(), rows["t"].tolist(), strict=True))
    assert len(keys) == len(rows["t"]) == len(published["t"])
    assert keys == set(zip(published["eps_id"].tolist(), published["t"].tolist(), strict=True))
    assert set(rows["worker_index"].tolist()) == {0, 1}
    assert {"weights_seq_no", "eps_id", "t", "env_id", "action_logp", "vf_preds"} <= set(rows)

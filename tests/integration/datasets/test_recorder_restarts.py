"""``rolloutfleet record`` killed (SIGKILL) while a fleet publishes, and started again on
the same folder, several times: the recording holds every published episode (Minari) and
every published row (Parquet) exactly once."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.datasets.parquet_files import read_columns
from rolloutfleet.datasets.stitching import stitch
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message, concat_messages
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.datasets.fleet_kit import cartpole_job, start_workers, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MANIFEST = {
    "apiVersion": "rolloutfleet.io/v1alpha1",
    "kind": "RolloutJob",
    "metadata": {"name": "kill"},
    "spec": {
        "replicas": 2,
        "env": {"id": "CartPole-v1", "numEnvs": 2},
        "sampling": {"rolloutFragmentLength": 40, "seed": 3},
        "redis": {"maxLen": 16, "backpressure": "block"},
    },
}


def record(manifest: Path, redis_url: str, output: Path, fmt: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "rolloutfleet.cli.main", "record", "--job", str(manifest), "--redis", redis_url,
               "--format", fmt, "--output", str(output), "--flush-seconds", "0.3"]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def entries_read(client: redis.Redis, group: str) -> int:
    groups = client.xinfo_groups(job_keys("default", "kill").batches)
    return next((int(g["entries-read"] or 0) for g in groups if g["name"].decode() == group), 0)


def test_killed_and_restarted_the_recorder_loses_and_duplicates_nothing(redis_url: str, tmp_path: Path) -> None:
    manifest = tmp_path / "kill.yaml"
    manifest.write_text(json.dumps(MANIFEST))
    client = redis.Redis.from_url(redis_url)
    truth = BatchConsumer(redis_url, "kill", group="truth", block_s=0.2)
    outputs = {fmt: tmp_path / fmt for fmt in ("minari", "parquet")}
    recorders = {fmt: record(manifest, redis_url, path, fmt) for fmt, path in outputs.items()}
    stream = job_keys("default", "kill").batches
    deadline = time.monotonic() + 60
    # Workers after the recorders' groups: under block backpressure nothing is trimmed before they read it.
    group: dict[str, str] = {}
    while len(group) < 2 or not set(group.values()) <= {g["name"].decode() for g in client.xinfo_groups(stream)}:
        assert time.monotonic() < deadline, "the recorders did not start"
        assert all(p.poll() is None for p in recorders.values()), [p.communicate() for p in recorders.values()]
        time.sleep(0.1)
        for fmt, path in outputs.items():  # each chose a group of its own, kept in its folder for restarts
            if (path / "_rolloutfleet.json").exists() and (
                chosen := json.loads((path / "_rolloutfleet.json").read_text())["group"]
            ):
                group[fmt] = chosen
    assert group["minari"] != group["parquet"]
    workers = start_workers(cartpole_job("kill"), redis_url, tmp_path)
    seen: list[Message] = []
    kills, rng = 0, random.Random(7)
    try:
        deadline = time.monotonic() + 300
        while kills < 4 or len(seen) < 120:
            assert time.monotonic() < deadline, f"{kills} kills, {len(seen)} batches"
            got = truth.read(timeout=0.2)
            truth.ack(got)
            seen += got
            fmt = "minari" if kills % 2 == 0 else "parquet"
            if kills < 4 and entries_read(client, group[fmt]) >= 15 * (kills + 1):
                time.sleep(rng.uniform(0.0, 0.3))  # somewhere in a read, a spool write, a flush
                recorders[fmt].send_signal(signal.SIGKILL)
                recorders[fmt].wait()
                recorders[fmt] = record(manifest, redis_url, outputs[fmt], fmt)
                kills += 1
    finally:
        stop(workers)
    try:
        deadline = time.monotonic() + 90
        while True:
            seen += (got := truth.read(timeout=0.2))
            truth.ack(got)
            groups = {g["name"].decode(): g for g in client.xinfo_groups(job_keys("default", "kill").batches)}
            if all(groups[g]["pending"] == 0 and groups[g]["lag"] == 0 for g in ("truth", *group.values())):
                break
            assert time.monotonic() < deadline, f"the recorders did not catch up: {groups}"
    finally:
        for process in recorders.values():
            process.send_signal(signal.SIGTERM)
        outcome = {fmt: process.communicate(timeout=60) for fmt, process in recorders.items()}
    for fmt, process in recorders.items():
        assert process.returncode == 0, outcome[fmt][1]
        assert f"(group {group[fmt]})" in outcome[fmt][0]  # every restart read as the folder's group
        assert "recorded minari" in outcome[fmt][0] or "recorded parquet" in outcome[fmt][0]

    published = concat_messages(seen)
    complete, broken, _ = stitch(published)
    assert not broken
    from minari.dataset.minari_dataset import MinariDataset

    dataset = MinariDataset(outputs["minari"] / "kill-v0" / "data")
    recorded = [int(m["eps_id"]) for m in dataset.storage.get_episode_metadata(range(dataset.total_episodes))]
    assert len(recorded) == len(set(recorded)), "an episode was written twice"
    assert json.loads((outputs["minari"] / "_rolloutfleet.json").read_text())["broken_episodes"] == 0
    assert set(recorded) == {e.eps_id for e in complete}, f"an episode was lost: {outcome['minari'][1][-3000:]}"
    by_id = {e.eps_id: e for e in complete}
    for episode, eps_id in zip(dataset.iterate_episodes(), recorded, strict=True):
        np.testing.assert_array_equal(episode.observations[:-1], by_id[eps_id].columns["obs"])
    rows = read_columns(outputs["parquet"])
    keys = list(zip(rows["eps_id"].tolist(), rows["t"].tolist(), strict=True))
    assert len(keys) == len(set(keys)), "a row was written twice"
    assert set(keys) == set(zip(published["eps_id"].tolist(), published["t"].tolist(), strict=True))

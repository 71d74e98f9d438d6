"""A multi-agent job (team tag: policies red and blue) recorded by ``rolloutfleet record``
as Parquet, one folder per policy, every row once with its agent id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
import yaml

from rolloutfleet.datasets.parquet_files import read_columns
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.entries import Message, concat_messages
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.datasets.fleet_kit import start_workers, stop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[3]
POLICIES = ("blue", "red")


def groups(client: redis.Redis, policy: str) -> dict[str, dict[bytes, object]]:
    return {g["name"].decode(): g for g in client.xinfo_groups(job_keys("default", "team-tag", policy).batches)}


def test_each_policy_is_recorded_in_its_own_folder(redis_url: str, tmp_path: Path) -> None:
    raw = yaml.safe_load((ROOT / "examples" / "multiagent.yaml").read_text())
    raw["spec"].update(replicas=1, redis={"maxLen": 8, "backpressure": "block"})
    raw["spec"]["env"]["numEnvs"] = 2
    manifest = tmp_path / "tag.yaml"
    manifest.write_text(json.dumps(raw))
    client = redis.Redis.from_url(redis_url)
    truth = {p: BatchConsumer(redis_url, "team-tag", group="truth", policy=p, block_s=0.1) for p in POLICIES}
    output = tmp_path / "out"
    recorder = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "record", "--job", str(manifest),
                                 "--redis", redis_url, "--format", "parquet", "--output", str(output),
                                 "--flush-seconds", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ))  # fmt: skip
    deadline = time.monotonic() + 60
    state = {p: output / p / "_rolloutfleet.json" for p in POLICIES}
    while not all(s.exists() and json.loads(s.read_text())["group"] in groups(client, p) for p, s in state.items()):
        assert recorder.poll() is None and time.monotonic() < deadline, recorder.communicate()
        time.sleep(0.1)
    mine = {p: json.loads(s.read_text())["group"] for p, s in state.items()}
    seen: dict[str, list[Message]] = {p: [] for p in POLICIES}
    workers = start_workers(RolloutJob.from_file(manifest), redis_url, tmp_path)
    try:
        deadline = time.monotonic() + 180
        while min(len(m) for m in seen.values()) < 20:
            assert time.monotonic() < deadline, {p: len(m) for p, m in seen.items()}
            for policy, consumer in truth.items():
                got = consumer.read(timeout=0.1)
                consumer.ack(got)
                seen[policy] += got
    finally:
        stop(workers)
    try:
        deadline = time.monotonic() + 60
        while not all(groups(client, p)[g]["pending"] == 0 and groups(client, p)[g]["lag"] == 0
                      for p in POLICIES for g in (mine[p], "truth")):  # fmt: skip
            assert time.monotonic() < deadline, "the recorder (or the truth) did not catch up"
            for policy, consumer in truth.items():
                seen[policy] += (got := consumer.read(timeout=0.1))
                consumer.ack(got)
    finally:
        recorder.send_signal(signal.SIGTERM)
        out, err = recorder.communicate(timeout=60)
    assert recorder.returncode == 0, err
    assert out.count("recorded parquet recording of job default/team-tag policy") == 2
    for policy in POLICIES:
        published = concat_messages(seen[policy])
        rows = read_columns(output / policy)
        assert set(rows["agent_id"].tolist()) == set(published["agent_id"].tolist())
        assert all(agent.startswith(policy) for agent in rows["agent_id"].tolist())
        keys = list(zip(rows["eps_id"].tolist(), rows["agent_id"].tolist(), rows["t"].tolist(), strict=True))
        assert len(keys) == len(set(keys)) == len(published["t"])
        assert set(keys) == set(zip(published["eps_id"].tolist(), published["agent_id"].tolist(),
                                    published["t"].tolist(), strict=True))  # fmt: skip

"""``make soak`` in short (about a minute, as CI runs it): the real ``rolloutfleet run``, two
workers, the PPO learner and the embedded redis-server, sampled from ``/proc``.

It asserts what must hold on any machine: every process was sampled, the learner consumed
batches and published weights, nothing was restarted, the CSV, the summary and the PNG were
written and read back. The memory figures themselves are the hour-long soak's business (a
one-minute run on a shared box judges no leak); no threshold here.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from matplotlib.image import imread

from bench.soak import run_soak
from tests.integration.redis_server import redis_server_binary

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_short_soak_samples_every_process_and_writes_csv_summary_and_plot(tmp_path):
    redis_server_binary()  # skips on a laptop without it, fails in CI
    result = run_soak(duration_s=60, out=tmp_path, interval_s=2.0)

    assert set(result.growths) == {"supervisor", "worker-0", "worker-1", "learner", "redis-server"}
    for growth in result.growths.values():
        assert growth.samples >= 10, growth
        assert growth.start_mb > 0 and growth.end_mb > 0, growth
    assert result.restarts == {"worker-0": 0, "worker-1": 0}
    assert result.learner["delivered"] > 0
    assert result.learner["env_steps"] > 0
    assert result.learner["weights_seq_no"] > 1  # weights went out after the first update too
    assert result.learner["duplicates"] == 0
    assert [p for p in result.problems if "grew" not in p] == []  # growth is not judged in a minute
    assert result.summary.startswith("soak: 1m, worker RSS ")
    assert "learner RSS" in result.summary and "redis RSS" in result.summary

    with (tmp_path / "samples.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["process"] for r in rows} == set(result.growths)
    assert all(int(r["rss_kb"]) > 0 for r in rows)

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["summary"] == result.summary

    image = imread(tmp_path / "rss.png")  # matplotlib reads back the PNG it drew
    assert image.shape[0] > 100 and image.shape[1] > 100
    assert len(np.unique(image[:, :, :3].reshape(-1, 3), axis=0)) > 10  # not blank: lines, text, colours

"""Heartbeats without Redis: what a worker writes, what a reader keeps, and what the module
(and the operator that reads through it) does not import."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

from rolloutfleet.transport.heartbeat import beat, parse_heartbeats

ROOT = Path(__file__).resolve().parents[3]


def test_a_beat_is_the_runner_metrics_a_reader_needs() -> None:
    stats = {"num_env_steps_sampled_lifetime": 300, "env_steps_per_s": 1234.5, "episode_return_mean": 21.0,
             "weights_seq_no": 4, "num_episodes": 7, "nonfinite_obs": 2, "nonfinite_rewards": 1,
             "filter_quarantined": 3, "backpressure_seconds": 12.34567}  # fmt: skip
    assert json.loads(beat(stats, now=99.5)) == {
        "env_steps": 300, "steps_per_s": 1234.5, "episode_return_mean": 21.0, "weights_seq_no": 4, "time": 99.5,
        "nonfinite_obs": 2, "nonfinite_rewards": 1, "filter_quarantined": 3, "blocked_s": 12.346,
    }  # fmt: skip


def test_a_beat_before_any_episode_has_no_return_yet() -> None:
    got = json.loads(beat({}, now=1.0))
    assert (got["env_steps"], got["steps_per_s"], got["weights_seq_no"]) == (0, 0.0, 0)
    assert math.isnan(got["episode_return_mean"])


def test_a_worker_waiting_for_a_learner_says_since_when_and_samples_nothing() -> None:
    stats = {"num_env_steps_sampled_lifetime": 300, "env_steps_per_s": 1234.5}
    waiting = parse_heartbeats({b"0": beat(stats, now=99.5, waiting_since=42.25).encode()})[0]
    assert waiting["waiting_for_learner_since"] == 42.25 and waiting["steps_per_s"] == 0.0
    assert waiting["env_steps"] == 300 and waiting["time"] == 99.5
    assert "waiting_for_learner_since" not in json.loads(beat(stats, now=99.5))  # absent when not waiting


def test_parse_keeps_workers_and_skips_what_is_not_a_heartbeat() -> None:
    raw = {
        b"0": beat({"num_env_steps_sampled_lifetime": 10}, now=5.0).encode(),
        "2": '{"env_steps": 3, "time": 6}',
        b"not-an-index": b'{"env_steps": 1}',
        b"3": b"not json",
        b"4": b"[1, 2]",  # JSON, but not an object
        b"5": b'{"env_steps": "many"}',  # not a number
    }
    beats = parse_heartbeats(raw)
    assert sorted(beats) == [0, 2]
    assert beats[0]["env_steps"] == 10.0 and beats[0]["time"] == 5.0
    assert beats[2] == {"env_steps": 3.0, "time": 6.0}


def test_the_module_imports_neither_sampling_nor_the_transport() -> None:
    heavy = ["torch", "gymnasium", "numpy", "rolloutfleet.fleet.worker_transport", "rolloutfleet.transport.publisher",
             "rolloutfleet.transport.weights", "rolloutfleet.transport.filter_sync", "rolloutfleet.sampling.env_runner"]  # fmt: skip
    code = f"import sys, rolloutfleet.transport.heartbeat; sys.exit(str(sorted(set({heavy!r}) & set(sys.modules))))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 1 and result.stderr.strip() == "[]", result.stderr


def test_the_operator_reads_heartbeats_without_importing_the_transport() -> None:
    imported = set()
    for source in sorted((ROOT / "operator" / "rolloutfleet_operator").glob("**/*.py")):
        # Every import statement, also those inside functions (imported on first use).
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert "rolloutfleet.transport.heartbeat" in imported
    assert "rolloutfleet.fleet.worker_transport" not in imported


def test_a_refused_weights_version_travels_in_the_beat_per_policy() -> None:
    raw = {
        b"0": beat({}, now=1.0, refused={"default": (3, "'pi.weight' holds 2 NaN/inf values")}).encode(),
        b"1": beat({}, now=1.0).encode(),
        b"2": b'{"env_steps": 1, "weights_refused": "garbled"}',  # a bad field is dropped, not the beat
    }
    beats = parse_heartbeats(raw)
    assert beats[0]["weights_refused"] == {"default": (3, "'pi.weight' holds 2 NaN/inf values")}
    assert "weights_refused" not in beats[1] and "weights_refused" not in json.loads(raw[b"1"])
    assert beats[2] == {"env_steps": 1.0}


def test_a_stuck_env_call_travels_in_the_last_beat() -> None:
    line = "spec.env.id 'X-v0': sub-env 1 step has not returned after 301 s (spec.env.callTimeoutSeconds is 300)"
    got = parse_heartbeats({b"0": beat({"num_env_steps_sampled_lifetime": 40}, now=5.0, stuck=line).encode()})[0]
    assert got["env_call_stuck"] == line and got["env_steps"] == 40.0
    assert "env_call_stuck" not in parse_heartbeats({b"0": beat({}, now=5.0).encode()})[0]

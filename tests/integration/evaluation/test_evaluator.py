"""Evaluation workers against a real redis-server: every weights version judged once, by
episodes that are exactly the ones gymnasium plays with the same seeds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from rolloutfleet.evaluation.confidence import summarize
from rolloutfleet.inference.policy import Policy
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.evaluation_results import read_results, results_key
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights import WeightPublisher
from tests.evaluation_kit import ANGLE, gymnasium_return, lean_weights, leaning
from tests.integration.fleet_helpers import wait_until

EPISODES = 6
SEED = 500
ROOT = Path(__file__).resolve().parents[3]


def evaluated_job(workers: int = 2) -> RolloutJob:
    return RolloutJob.from_dict({"metadata": {"name": "judged"}, "spec": {
        "replicas": 1, "env": {"id": "CartPole-v1"}, "sampling": {"seed": 0},
        "evaluation": {"workers": workers, "episodes": EPISODES, "seed": SEED}}})  # fmt: skip


def start_evaluator(job: RolloutJob, url: str, index: int, workers: int) -> subprocess.Popen[bytes]:
    config = WorkerConfig(job=job, worker_index=index, num_workers=workers, redis_url=url, metrics_port=0)
    env = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_ROLE": "evaluator",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "worker"), str(ROOT)])}  # fmt: skip
    command = [sys.executable, "-m", "rolloutfleet.cli.main", "worker"]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def evaluators(redis_url: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    job = evaluated_job()
    processes = [start_evaluator(job, redis_url, index, 2) for index in range(2)]
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def expected(version: int, reads: slice) -> dict[str, Any]:
    played = [gymnasium_return(SEED + i, leaning(reads)) for i in range(EPISODES)]
    return summarize(version, played).to_json()


def test_each_version_is_judged_once_with_gymnasiums_own_episodes(
    redis_url: str, evaluators: list[subprocess.Popen[bytes]]
) -> None:
    job = evaluated_job()
    keys = job_keys(job.namespace, job.name)
    client = redis.Redis.from_url(redis_url)
    like = Policy(job.spec.policy, *_spaces()).get_weights()
    publisher = WeightPublisher(redis_url, job)
    assert publisher.publish(lean_weights(like, ANGLE)) == 1
    wait_until(lambda: len(read_results(client, keys)) == 1, 120, "version 1's evaluation")
    assert publisher.publish(lean_weights(like)) == 2
    wait_until(lambda: len(read_results(client, keys)) == 2, 120, "version 2's evaluation")

    results = read_results(client, keys)
    assert all(isinstance(result.pop("evaluated_at"), float) for result in results)
    assert results == [expected(1, ANGLE), expected(2, slice(2, 4))]
    assert results[1]["return_mean"] == 500.0 and results[1]["return_half_width"] == 0.0
    assert results[0]["return_mean"] < 500.0 and results[0]["return_half_width"] > 0.0
    assert client.xlen(results_key(keys)) == 2  # one summary per version, not one per worker
    # Each episode was played once: indexes 0..EPISODES-1, by the two workers together.
    for version in (1, 2):
        episodes = client.hgetall(f"{keys.tag}:evaluation:{version}:episodes")
        assert sorted(int(i) for i in episodes) == list(range(EPISODES))
        assert int(client.get(f"{keys.tag}:evaluation:{version}:claims") or 0) >= EPISODES
    assert not client.exists(keys.batches)  # evaluation never feeds the training stream

    # `rolloutfleet evaluate` plays the same seeds: the workers' numbers for the current version.
    manifest = Path(os.environ.get("TMPDIR", "/tmp")) / f"judged-{os.getpid()}.json"
    manifest.write_text(json.dumps(job.to_dict()))
    shell = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "evaluate", str(manifest), "--redis", redis_url, "--json"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "worker"), str(ROOT)])},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    manifest.unlink()
    assert shell.returncode == 0, shell.stderr
    assert json.loads(shell.stdout.splitlines()[-1]) == results[1]
    assert shell.stdout.count("episode ") == EPISODES

    # `rolloutfleet streams` shows both versions, the newest last.
    shown = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "streams", "--redis", redis_url],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "worker"), str(ROOT)]), "COLUMNS": "200"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = [line for line in shown.stdout.splitlines() if "evaluation version" in line]
    first = f"{results[0]['return_mean']:.4g} ± {results[0]['return_half_width']:.4g}"
    assert lines == [
        f"default/judged: evaluation version 1: return {first} (95 % CI, {EPISODES} episodes), "
        f"length {results[0]['length_mean']:.4g}",
        f"default/judged: evaluation version 2: return 500 ± 0 (95 % CI, {EPISODES} episodes), length 500",
    ]

    for process in evaluators:  # SIGTERM: the episode in hand is finished, then exit 0
        process.send_signal(signal.SIGTERM)
    assert [process.wait(timeout=60) for process in evaluators] == [0, 0]
    assert client.xlen(results_key(keys)) == 2


def test_evaluate_says_in_one_line_when_no_version_is_published(redis_url: str, tmp_path: Path) -> None:
    manifest = tmp_path / "judged.json"
    manifest.write_text(json.dumps(evaluated_job().to_dict()))
    shell = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "evaluate", str(manifest), "--redis", redis_url],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "worker"), str(ROOT)])},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert shell.returncode == 1
    assert shell.stderr.strip() == "rolloutfleet evaluate: no weights version of job default/judged is published yet"


def _spaces() -> tuple[Any, Any]:
    import gymnasium as gym

    env = gym.make("CartPole-v1")
    return env.observation_space, env.action_space

"""A real worker process serving an external env, simulator processes stepping CartPole through
PolicyClient, a real redis-server: the stream holds exactly their transitions; bad calls are
refused naming the problem and the worker goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet.client import PolicyClient, PolicyClientError
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import read_heartbeats
from tests.integration.fleet_helpers import read_until, wait_until

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def external_job(fragment: int, **external: Any) -> RolloutJob:
    return RolloutJob.from_dict(
        {
            "metadata": {"name": "ext"},
            "spec": {
                "env": {"id": "CartPole-v1", "external": external},
                "sampling": {"rolloutFragmentLength": fragment, "seed": 0},
                "redis": {"maxLen": 1000},
            },
        }
    )


def start_worker(
    job: RolloutJob, redis_url: str, port: int, tmp_path: Path, worker_index: int = 0, num_workers: int = 1
) -> subprocess.Popen[str]:
    config = WorkerConfig(job=job, worker_index=worker_index, num_workers=num_workers, redis_url=redis_url,
                          metrics_port=0)  # fmt: skip
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_EXTERNAL_PORT": str(port),
               "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination")}  # fmt: skip
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen([sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ,
                                  stderr=log, text=True)  # fmt: skip
    address = f"127.0.0.1:{port}"

    def serving() -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        try:
            PolicyClient(address).info()
            return True
        except OSError:
            return False

    wait_until(serving, 120, "the worker serving actions")
    return worker


def simulate(
    address: str, log: Path, seed: int, episodes: int, vanish_after: int | None = None, inference: str = "remote"
) -> subprocess.Popen[bytes]:
    extra = ["--inference", inference] + ([] if vanish_after is None else ["--vanish-after", str(vanish_after)])
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.external.simulator", address, str(log), "--seed", str(seed),
         "--episodes", str(episodes), *extra], cwd=ROOT,
    )  # fmt: skip


def logged(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def rows_by_step(batch: SampleBatch) -> dict[tuple[int, int], int]:
    return {(int(e), int(t)): i for i, (e, t) in enumerate(zip(batch["eps_id"], batch["t"], strict=True))}


def assert_row_is(batch: SampleBatch, i: int, step: dict[str, Any], truncated: bool | None = None) -> None:
    assert np.array_equal(batch["obs"][i], np.float32(step["obs"]))
    assert np.array_equal(batch["new_obs"][i], np.float32(step["new_obs"]))
    assert int(batch["actions"][i]) == step["action"] and float(batch["rewards"][i]) == step["reward"]
    assert bool(batch["terminateds"][i]) == step["terminated"]
    assert bool(batch["truncateds"][i]) == (step["truncated"] if truncated is None else truncated)


def stop(worker: subprocess.Popen[str]) -> int:
    worker.send_signal(signal.SIGTERM)
    return worker.wait(timeout=60)


@pytest.mark.parametrize("inference", ["remote", "local"])
def test_the_stream_holds_exactly_the_simulators_transitions(redis_url: str, tmp_path: Path, inference: str) -> None:
    job = external_job(fragment=40, port=9900)
    consumer = BatchConsumer(redis_url, "ext", group="test")
    port = free_port()
    worker = start_worker(job, redis_url, port, tmp_path)
    try:
        logs = [tmp_path / f"sim{i}.jsonl" for i in range(2)]
        sims = [simulate(f"127.0.0.1:{port}", log, 1000 * i, 4, inference=inference) for i, log in enumerate(logs)]
        assert [sim.wait(timeout=120) for sim in sims] == [0, 0]
        steps = [step for log in logs for step in logged(log)]
        assert stop(worker) == 0  # a stop publishes the rows short of a fragment too
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= len(steps), timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    batch = SampleBatch.concat([m.batch for m in messages])
    assert {m.metadata.worker_index for m in messages} == {0}
    assert [len(m.batch) for m in messages[:-1]] == [40] * (len(messages) - 1)
    index = rows_by_step(batch)
    assert len(index) == len(batch) == len(steps)  # every row one of the simulators' steps, none twice
    for step in steps:
        assert_row_is(batch, index[(step["eps_id"], step["t"])], step)
    assert int(batch["terminateds"].sum() + batch["truncateds"].sum()) == 8  # 2 simulators x 4 whole episodes
    assert batch["action_dist_inputs"].shape == (len(steps), 2) and np.all(batch["action_logp"] <= 0)


def test_bad_calls_vanished_clients_and_a_full_server(redis_url: str, tmp_path: Path) -> None:
    job = external_job(fragment=4, port=9900, maxClients=2, episodeTimeoutSeconds=1)
    consumer = BatchConsumer(redis_url, "ext", group="test")
    port = free_port()
    address = f"127.0.0.1:{port}"
    worker = start_worker(job, redis_url, port, tmp_path)
    try:
        # A simulator that vanishes after 5 actions: 4 transitions completed, the 5th never will.
        gone = tmp_path / "gone.jsonl"
        assert simulate(address, gone, seed=7, episodes=1, vanish_after=5).wait(timeout=60) == 0
        steps = logged(gone)[:4]
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= 4, timeout=30)
        batch = SampleBatch.concat([m.batch for m in messages])
        index = rows_by_step(batch)
        assert sorted(index) == [(steps[0]["eps_id"], t) for t in range(4)]
        for step in steps:  # closed as truncated after the timeout: its last row says so, none terminated
            assert_row_is(batch, index[(step["eps_id"], step["t"])], step, truncated=step["t"] == 3)

        first, second = PolicyClient(address), PolicyClient(address)
        episode = first.start_episode()
        with pytest.raises(PolicyClientError, match=r"obs: expected shape \[4\], got \[2\] \(episode \d+ dropped\)"):
            first.get_action(episode, [0.0, 0.0])
        with pytest.raises(PolicyClientError, match=r"obs: expected numbers \(float32\), got strings"):
            first.get_action(first.start_episode(), ["a", "b", "c", "d"])
        with pytest.raises(PolicyClientError, match=f"episode {episode} has ended"):
            first.log_returns(episode, 1.0)  # a reward for an episode that is over (dropped)
        with pytest.raises(PolicyClientError, match="unknown episode id 42"):
            first.get_action("42", [0.0] * 4)
        second.start_episode()
        with pytest.raises(PolicyClientError, match=r"server full: 2 clients connected") as full:
            PolicyClient(address).start_episode()
        assert full.value.status == 503

        # The worker goes on: a whole episode from the first client reaches the stream.
        episode = first.start_episode()
        obs = [0.01, 0.0, 0.0, 0.0]
        for _ in range(8):  # 8 rows: two whole fragments
            first.get_action(episode, obs)
            first.log_returns(episode, 1.0)
        first.end_episode(episode, obs, truncated=False)
        more = read_until(consumer, lambda ms: any(bool(m.batch["terminateds"].any()) for m in ms), timeout=30)
        ended = SampleBatch.concat([m.batch for m in more])
        assert int(episode) in ended["eps_id"].tolist()

        def counted() -> bool:
            beat = read_heartbeats(redis_url, job).get(0, {})
            return (beat.get("external/episodes_timed_out"), beat.get("external/episodes_dropped"),
                    beat.get("external/clients_refused")) == (1, 2, 1)  # fmt: skip

        wait_until(counted, 30, "the heartbeat counting the timed-out and dropped episodes and the refusal")
        assert stop(worker) == 0
    finally:
        if worker.poll() is None:
            worker.kill()


def test_rolloutfleet_run_prints_the_address_and_hands_it_to_its_command(tmp_path: Path) -> None:
    port = free_port()
    manifest = tmp_path / "ext.yaml"
    manifest.write_text(
        "kind: RolloutJob\nmetadata: {name: ext}\n"
        f"spec: {{env: {{id: CartPole-v1, external: {{port: {port}}}}}, sampling: {{rolloutFragmentLength: 20}}}}\n"
    )
    log = tmp_path / "sim.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "rolloutfleet.cli.main", "run", str(manifest), "--no-status", "--",
         sys.executable, "-m", "tests.integration.external.simulator", "env", str(log), "--episodes", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"simulators connect to 127.0.0.1:{port}" in result.stderr
    steps = logged(log)
    assert sum(step["terminated"] or step["truncated"] for step in steps) == 2


def metric(port: int, name: str) -> float:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_a_stop_during_a_publish_still_publishes_every_row_the_clients_made(own_redis: Any, tmp_path: Path) -> None:
    """SIGTERM while a fragment's publish waits on Redis (paused), with client rows made after
    that fragment was cut: the worker publishes the fragment, then the rows, then exits."""
    job = external_job(fragment=4, port=9900)
    consumer = BatchConsumer(own_redis.url, "ext", group="test")
    port = free_port()
    worker = start_worker(job, own_redis.url, port, tmp_path)
    log = (tmp_path / "worker.log").read_text()
    metrics_port = int(re.search(r"probes and metrics on [0-9a-f.:]*:(\d+)", log).group(1))  # type: ignore[union-attr]
    try:
        client = PolicyClient(f"127.0.0.1:{port}")
        episode = client.start_episode()

        def act(k: int) -> None:
            client.get_action(episode, [k / 100, 0.0, 0.0, 0.0])
            client.log_returns(episode, 1.0)

        for k in range(6):  # rows 0-4 complete, 0-3 released: the first fragment
            act(k)
        read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) == 4, timeout=30)
        redis = own_redis.client()
        wait_until(lambda: bool(read_heartbeats(own_redis.url, job)), 30, "the first fragment's heartbeat")
        redis.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # reads (weights polls) go on, writes wait
        try:
            for k in range(6, 10):  # rows 5-8 complete, 4-7 released: the second fragment, cut
                act(k)
            wait_until(lambda: metric(metrics_port, "rolloutfleet_env_steps_total") >= 8, 30,
                       "the worker cutting the second fragment (its publish then waits on Redis)")  # fmt: skip
            client.end_episode(episode, [0.1, 0.0, 0.0, 0.0])  # rows 8 and 9: made after the cut
            worker.send_signal(signal.SIGTERM)
        finally:
            redis.execute_command("CLIENT", "UNPAUSE")
        assert worker.wait(timeout=60) == 0
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= 6, timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    batch = SampleBatch.concat([m.batch for m in messages])
    assert batch["t"].tolist() == [4, 5, 6, 7, 8, 9]
    assert batch["terminateds"].tolist() == [False] * 5 + [True]

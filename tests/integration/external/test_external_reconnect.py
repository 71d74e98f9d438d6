"""Reconnects: two real worker processes of one job, a real redis-server, and a forwarder in
front of them standing in for the job's Service (a worker per connection). A connection cut
that lands on the same worker continues the episode whole; one that lands on the other worker
continues it as a new episode there, and the old worker closes the old one as truncated after
its timeout. Every row in the stream is compared with what the simulator saw and did."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rolloutfleet.client import PolicyClient, PolicyClientError
from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.external.runner import ExternalRunner
from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.runner_factory import make_env_runner
from rolloutfleet.spec.sections.external import PORT_VARIABLE
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.heartbeat import read_heartbeats
from tests.integration.external.switchboard import Switchboard
from tests.integration.external.test_external_worker import external_job, start_worker
from tests.integration.fleet_helpers import read_until, wait_until

pytestmark = pytest.mark.integration
Hooks = dict[tuple[str, int], Callable[[], None]]


def play(client: PolicyClient, seed: int, hooks: Hooks) -> list[dict[str, Any]]:
    """One CartPole episode through ``client``; ``hooks[(moment, t)]`` runs before step t's
    ``act``ion call, its ``reward`` call, or (t = -1) the ``end`` call. Every step logged, with
    the id its action was asked under."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    episode = client.start_episode()
    steps: list[dict[str, Any]] = []
    for t in range(500):
        hooks.get(("act", t), lambda: None)()
        action = client.get_action(episode, obs)
        server = client.server_episode_id(episode)
        new_obs, reward, terminated, truncated, _ = env.step(action)
        hooks.get(("reward", t), lambda: None)()
        client.log_returns(episode, float(reward))
        steps.append({"episode": episode, "server": server, "obs": obs, "action": action, "reward": float(reward),
                      "new_obs": new_obs, "terminated": terminated, "truncated": truncated})  # fmt: skip
        obs = new_obs
        if terminated or truncated:
            break
    hooks.get(("end", -1), lambda: None)()
    client.end_episode(episode, obs, truncated=bool(truncated))
    return steps


def stream_episodes(batch: SampleBatch) -> dict[int, list[int]]:
    """eps_id -> its rows' indices in stream order, checked to be t = 0, 1, 2, ..."""
    rows: dict[int, list[int]] = {}
    for i, eps_id in enumerate(batch["eps_id"].tolist()):
        rows.setdefault(int(eps_id), []).append(i)
    for eps_id, indices in rows.items():
        assert batch["t"][indices].tolist() == list(range(len(indices))), eps_id  # whole, in order
    return rows


def assert_rows_are(batch: SampleBatch, indices: list[int], steps: list[dict[str, Any]], cut: bool) -> None:
    """The rows are exactly these steps; ``cut``: the episode was closed by a move (its last row
    truncated, never terminated)."""
    assert len(indices) == len(steps)
    for k, (i, step) in enumerate(zip(indices, steps, strict=True)):
        assert np.array_equal(batch["obs"][i], np.float32(step["obs"]))
        assert np.array_equal(batch["new_obs"][i], np.float32(step["new_obs"]))
        assert int(batch["actions"][i]) == step["action"] and float(batch["rewards"][i]) == step["reward"]
        last_cut = cut and k == len(steps) - 1
        flags = (False, True) if last_cut else (step["terminated"], step["truncated"])
        assert (bool(batch["terminateds"][i]), bool(batch["truncateds"][i])) == flags


def stop_all(workers: list[Any]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            assert worker.wait(timeout=60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()


def two_workers(redis_url: str, tmp_path: Path) -> tuple[Any, list[Any], list[int]]:
    """Workers 0 and 1 of one job. One row a fragment: a worker publishes (and beats, with its
    counters) as soon as a timeout releases the row it held back."""
    job = external_job(fragment=1, port=9900, episodeTimeoutSeconds=2)
    ports = [free_port(), free_port()]
    workers = []
    for i, port in enumerate(ports):
        (tmp_path / f"w{i}").mkdir()
        workers.append(start_worker(job, redis_url, port, tmp_path / f"w{i}", worker_index=i, num_workers=2))
    return job, workers, ports


def test_remote_episodes_stay_whole_on_their_worker_and_go_on_as_new_ones_on_another(
    redis_url: str, tmp_path: Path
) -> None:
    job, workers, ports = two_workers(redis_url, tmp_path)
    consumer = BatchConsumer(redis_url, "ext", group="test")
    board = Switchboard(ports[0])
    try:
        client = PolicyClient(board.address)
        to = {i: (lambda p=port: board.switch(p)) for i, port in enumerate(ports)}
        # 0: cut and back to worker 0 before step 2 (continues), to worker 1 before step 4's action
        # 1: to worker 0 between step 3's action and its reward; 2: to worker 1 before the end call
        played = [
            play(client, 0, {("act", 2): to[0], ("act", 4): to[1]}),
            play(client, 1, {("reward", 3): to[0]}),
            play(client, 2, {("end", -1): to[1]}),
            play(client, 3, {}),
        ]
        assert client.episodes_moved == 3
        assert [ports.index(p) for p in board.connections] == [0, 0, 1, 0, 1]  # every cut: a new connection

        def timed_out() -> bool:  # the old workers close the moved-from episodes after 2 s of silence
            beats = read_heartbeats(redis_url, job)
            return [beats.get(i, {}).get("external/episodes_timed_out") for i in (0, 1)] == [2, 1]

        wait_until(timed_out, 60, "worker 0 timing out 2 episodes and worker 1 one")
        stop_all(workers)
        total = sum(len(steps) for steps in played) - 3  # a move loses the step in flight
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= total, timeout=60)
    finally:
        board.close()
        stop_all(workers)
    batch = SampleBatch.concat([m.batch for m in messages])
    assert len(batch) == total
    rows = stream_episodes(batch)
    # Each run of steps asked under one id is one episode in the stream, on the worker it ran on.
    runs: list[tuple[str, list[dict[str, Any]]]] = []
    for steps in played:
        for step in steps:
            if not runs or runs[-1][0] != step["server"]:
                runs.append((step["server"], []))
            runs[-1][1].append(step)
    workers_of_runs = [int(server) >> 44 for server, _ in runs]
    assert workers_of_runs == [0, 1, 1, 0, 0, 1]  # 0 moved to worker 1, 1 back to 0, 2 lost its end, 3 whole
    assert sorted(rows) == sorted(int(server) for server, _ in runs)
    moved_from = {0, 2, 4}  # the runs a move closed: their last step is lost, the one before truncated
    for k, (server, steps) in enumerate(runs):
        cut = k in moved_from
        assert_rows_are(batch, rows[int(server)], steps[:-1] if cut else steps, cut)
    assert played[0][2]["server"] == played[0][0]["server"]  # a cut to the same worker: the same episode


def test_a_worker_that_stops_mid_episode_sends_the_episode_on_to_another(redis_url: str, tmp_path: Path) -> None:
    _, workers, ports = two_workers(redis_url, tmp_path)
    consumer = BatchConsumer(redis_url, "ext", group="test")
    board = Switchboard(ports[0])
    probe = PolicyClient(f"127.0.0.1:{ports[0]}")

    def stopping() -> bool:
        try:
            probe.start_episode()
        except PolicyClientError as exc:
            return exc.kind == "stopping"
        except OSError:
            return True  # gone already
        return False

    def stop_worker_0() -> None:
        board.switch(ports[1], cut_open=False)  # its endpoint leaves the Service; open connections stay
        workers[0].send_signal(signal.SIGTERM)
        wait_until(stopping, 60, "worker 0 stopping")

    try:
        client = PolicyClient(board.address)
        steps = play(client, 7, {("act", 4): stop_worker_0})
        assert client.episodes_moved == 1
        assert workers[0].wait(timeout=60) == 0
        stop_all(workers)
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= len(steps) - 1, timeout=60)
    finally:
        board.close()
        stop_all(workers)
    batch = SampleBatch.concat([m.batch for m in messages])
    rows = stream_episodes(batch)
    first, second = steps[0]["server"], steps[-1]["server"]
    assert [s["server"] for s in steps] == [first] * 4 + [second] * (len(steps) - 4)
    assert (int(first) >> 44, int(second) >> 44) == (0, 1) and sorted(rows) == sorted([int(first), int(second)])
    # The stopping worker closed the episode as truncated: the step in flight (3) lost with it.
    assert_rows_are(batch, rows[int(first)], steps[:3], cut=True)
    assert_rows_are(batch, rows[int(second)], steps[4:], cut=False)


def test_a_stopping_worker_answers_503_and_the_client_goes_on_through_a_new_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window the test above rarely hits (its worker exits within moments): a worker that
    is stopping but still answers. Two action servers in this process, no Redis."""
    monkeypatch.setenv(PORT_VARIABLE, "0")
    job = external_job(fragment=100, port=9900)
    with make_env_runner(job, 0, 2) as old, make_env_runner(job, 1, 2) as new:
        assert isinstance(old, ExternalRunner) and isinstance(new, ExternalRunner)
        board = Switchboard(old.port)
        client = PolicyClient(board.address)
        episode = client.start_episode()
        for k in range(3):
            client.get_action(episode, [float(k), 0.0, 0.0, 0.0])
            client.log_returns(episode, 1.0)
        board.switch(new.port, cut_open=False)  # the kept-alive connection still reaches the old one
        with old.lock:
            old.book.close_all("the worker stopped: closed as truncated")  # what SIGTERM does first
        client.get_action(episode, [3.0, 0.0, 0.0, 0.0])  # 503 "worker stopping", then a new connection
        client.log_returns(episode, 1.0)
        client.end_episode(episode, [4.0, 0.0, 0.0, 0.0])
        board.close()
        assert [board_port == new.port for board_port in board.connections] == [False, True]
        assert client.episodes_moved == 1
        kept, moved = old.book.take(None), new.book.take(None)
    assert [(float(r["obs"][0]), r["t"], r["terminateds"], r["truncateds"]) for r in kept] == [
        (0.0, 0, False, False),
        (1.0, 1, False, True),  # step 2's action never saw its consequence on the old worker
    ]
    assert [(float(r["obs"][0]), float(r["new_obs"][0]), r["t"], r["terminateds"]) for r in moved] == [
        (3.0, 4.0, 0, True)
    ]
    assert (kept[0]["eps_id"], moved[0]["eps_id"] >> 44) == (int(episode), 1)  # a new episode of worker 1


def test_local_inference_ships_the_unshipped_rows_to_the_new_episode(redis_url: str, tmp_path: Path) -> None:
    job, workers, ports = two_workers(redis_url, tmp_path)
    consumer = BatchConsumer(redis_url, "ext", group="test")
    board = Switchboard(ports[0])
    try:
        client = PolicyClient(board.address, inference="local", ship_every=2)
        steps = play(client, 5, {("act", 5): lambda: board.switch(ports[1])})
        assert client.episodes_moved == 1
        wait_until(lambda: read_heartbeats(redis_url, job).get(0, {}).get("external/episodes_timed_out") == 1, 60,
                   "worker 0 timing out the moved-from episode")  # fmt: skip
        stop_all(workers)
        messages = read_until(consumer, lambda ms: sum(len(m.batch) for m in ms) >= len(steps), timeout=60)
    finally:
        board.close()
        stop_all(workers)
    batch = SampleBatch.concat([m.batch for m in messages])
    rows = stream_episodes(batch)
    first = int(steps[0]["episode"])
    (second,) = set(rows) - {first}
    assert (first >> 44, second >> 44) == (0, 1)
    # Nothing lost: the rows shipped before the move on worker 0 (its last truncated), the rest on 1.
    shipped = len(rows[first])
    assert 1 <= shipped <= 4 and len(rows[second]) == len(steps) - shipped
    assert_rows_are(batch, rows[first], steps[:shipped], cut=True)
    assert_rows_are(batch, rows[second], steps[shipped:], cut=False)

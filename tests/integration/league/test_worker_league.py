"""A league through a real worker process and a real redis-server: the learner freezes
snapshots and publishes a plan; the worker's opponent seats play them episode by episode,
at most ``cachedPolicies`` at a time, and every game it finishes lands in the results
stream with who played which seat and tic-tac-toe's own outcome; a new plan takes over
within its refresh; the opponent's rows are never published unless asked for, and then
each row joins the game it was played in (its ``eps_id``), whose result names the snapshot
(read whole then, with its value function; otherwise only what acting needs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from rolloutfleet.fleet.embedded_redis import free_port
from rolloutfleet.fleet.runner_factory import build_policy_models
from rolloutfleet.league.records import MatchResult
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.rules.worker_config import WorkerConfig
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.consumer import BatchConsumer
from rolloutfleet.transport.redis.keys import job_keys
from tests.integration.fleet_helpers import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
JOB = "ttt-league"


def league_job(name: str = JOB, **league: object) -> RolloutJob:
    manifest = RolloutJob.from_file(ROOT / "examples/tictactoe.yaml").to_dict()
    manifest["metadata"] = {"name": name}
    manifest["spec"]["replicas"] = 1
    manifest["spec"]["env"]["numEnvs"] = 4
    manifest["spec"]["league"] = {"opponent": "main_v1", "cachedPolicies": 2, "planRefreshSeconds": 0.5, **league}
    return RolloutJob.from_dict(manifest)


def snapshots(store: PolicyStore, job: RolloutJob, names: tuple[str, ...]) -> None:
    model = build_policy_models(job)["main_v1"]
    base = {name: value.detach().numpy() for name, value in model.state_dict().items()}
    for i, name in enumerate(names):
        store.snapshot(name, {k: v * (i + 1) for k, v in base.items()}, step=10 * (i + 1))


def start_worker(job: RolloutJob, redis_url: str, tmp_path: Path) -> subprocess.Popen[str]:
    config = WorkerConfig(job=job, worker_index=0, num_workers=1, redis_url=redis_url, metrics_port=free_port())
    environ = {**os.environ, **config.to_environ(), "ROLLOUTFLEET_TERMINATION_LOG": str(tmp_path / "termination")}
    return subprocess.Popen(
        [sys.executable, "-m", "rolloutfleet.cli.main", "worker"], env=environ, stderr=subprocess.PIPE, text=True
    )


def games(store: PolicyStore) -> list[MatchResult]:
    return [result for _, result in store.results()]


def opponent_of(result: MatchResult) -> str:
    (name,) = [policy for policy in result.seats.values() if policy != "main"]
    return name


def test_a_worker_plays_the_plans_snapshots_and_records_every_game(redis_url: str, tmp_path: Path) -> None:
    job = league_job()
    store = PolicyStore(redis_url, JOB)
    snapshots(store, job, ("s1", "s2", "s3"))
    assert store.publish_plan({"s1": 1, "s2": 1, "s3": 2}) == {"s1": 0.25, "s2": 0.25, "s3": 0.5}
    client = redis.Redis.from_url(redis_url)
    getranges = client.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0)
    worker = start_worker(job, redis_url, tmp_path)
    try:
        wait_until(lambda: len(games(store)) >= 40, 120, "40 games in the results stream")
        played = games(store)
        for result in played:
            assert sorted(result.seats) == ["player_1", "player_2"] and result.worker == 0
            assert sorted(result.returns.values()) in ([-1.0, 1.0], [0.0, 0.0])  # tic-tac-toe's outcomes
            assert opponent_of(result) in {"s1", "s2", "s3"}
        assert {opponent_of(r) for r in played} == {"s1", "s2", "s3"}
        # A new plan takes over within its refresh (0.5 s) plus the games then running.
        store.publish_plan({"s2": 1})
        seen = len(games(store))
        time.sleep(3)
        wait_until(lambda: len(games(store)) >= seen + 60, 120, "60 more games")
        assert {opponent_of(r) for r in games(store)[-20:]} == {"s2"}
        # Ratings from what the worker recorded; the opponent's rows never reach a stream.
        before = len(games(store))  # the worker goes on recording meanwhile
        table = store.ratings()
        assert {"main", "s1", "s2", "s3"} <= set(table.ratings)
        assert before <= table.games["main"] <= len(games(store))
        # The opponent's rows go nowhere: its slots read only what acting needs of each snapshot.
        assert client.info("commandstats")["cmdstat_getrange"]["calls"] > getranges
        assert client.xlen(job_keys("default", JOB, "main").batches) > 0
        assert not client.exists(job_keys("default", JOB, "main_v1").batches)
        assert not [key for key in client.scan_iter("*#*")]  # no slot's stream or key
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    store.close()


def test_asked_for_the_opponents_rows_a_worker_publishes_them_joined_to_their_games(
    redis_url: str, tmp_path: Path
) -> None:
    name = JOB + "-rows"
    job = league_job(name, publishOpponentRows=True)
    assert job.published_policies == ["main", "main_v1"]
    store = PolicyStore(redis_url, name)
    snapshots(store, job, ("s1", "s2"))
    store.publish_plan({"s1": 1, "s2": 1})
    opponent = BatchConsumer(redis_url, name, policy="main_v1", group="test", block_s=0.1)
    worker = start_worker(job, redis_url, tmp_path)
    rows: list[tuple[int, str]] = []  # (eps_id, the agent the opponent played)
    try:
        deadline = time.monotonic() + 120
        while len({eps for eps, _ in rows}) < 30:
            assert time.monotonic() < deadline and worker.poll() is None, f"{len(rows)} opponent rows"
            for message in opponent.read(timeout=0.5):
                agents = message.metadata.agent_ids
                batch = message.batch
                assert np.isfinite(batch["vf_preds"]).all()  # published: the snapshots read whole
                rows += [(int(e), agents[int(a)]) for e, a in zip(batch["eps_id"], batch["agent_index"], strict=True)]
                opponent.ack([message])
        wait_until(lambda: len(games(store)) >= 30, 60, "30 games in the results stream")
    finally:
        worker.terminate()
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    results = {r.eps_id: r for r in games(store)}
    joined = [(results[eps], agent) for eps, agent in rows if eps in results]
    assert len({id(r) for r, _ in joined}) >= 20, "the opponent's rows join the games in the results stream"
    for result, agent in joined:  # the seat of each row is the one a snapshot played in that game
        assert result.seats[agent] in {"s1", "s2"} and "main" in result.seats.values()
    store.close()


def test_a_plan_names_only_the_leagues_snapshots(redis_url: str) -> None:
    with PolicyStore(redis_url, JOB) as store:
        store.snapshot("s1", {"w": np.zeros(2, np.float32)})
        with pytest.raises(KeyError, match="nope"):
            store.publish_plan({"s1": 1, "nope": 1})
        with pytest.raises(ValueError, match=">= 0"):
            store.publish_plan({"s1": -1})
        assert store.publish_plan({"s1": 0}) == {} and store.plan() == {}
        assert store.publish_plan({"s1": 3}) == {"s1": 1.0} and store.plan() == {"s1": 1.0}

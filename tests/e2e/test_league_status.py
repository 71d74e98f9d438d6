"""spec.league against a real API server and the test kubelet: a worker pod plays the
league's snapshots, its games reach the results stream, the learner's plan publishes the
standings, and the job's status (and ``kubectl get rj -o wide``) shows them."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.league.matchmaking import Uniform
from rolloutfleet.league.store import PolicyStore
from rolloutfleet.sampling.multiagent.env_runner import MultiAgentEnvRunner
from rolloutfleet.spec.job import RolloutJob
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest

LEAGUE = {
    "env": {"id": "pettingzoo.classic.tictactoe_v3", "numEnvs": 4},
    "policy": {"hidden": [16], "vfShareLayers": False, "device": "cpu"},
    "multiAgent": {
        "policies": {"main": {}, "main_v1": {}},
        "policyMapping": {"entryPoint": "rolloutfleet.examples.seats:alternate_seats"},
        "policiesToTrain": ["main"],
        "countStepsBy": "env_steps",
    },
    "league": {"opponent": "main_v1", "cachedPolicies": 4, "planRefreshSeconds": 1},
}


def snapshots(job: RolloutJob) -> dict[str, Mapping[str, np.ndarray]]:
    base = MultiAgentEnvRunner(job).get_weights(["main_v1"])["main_v1"]
    return {f"main-{i:06d}": {k: v * (1 + i) for k, v in base.items()} for i in range(3)}


def test_a_league_jobs_status_shows_the_standings_its_learner_published(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    manifest = job_manifest("league", redis_server.url, replicas=1, **LEAGUE)
    manifest["spec"]["redis"]["maxLen"] = 1000
    jobs.create(manifest)
    stored = json.loads(cluster.kubectl("-n", namespace, "get", "rj", "league", "-o", "json").stdout)["spec"]
    assert stored["league"]["publishOpponentRows"] is False  # the API server's default, as the model's
    job = RolloutJob.from_dict({**manifest, "metadata": {"name": "league", "namespace": namespace}})
    assert job.spec.league is not None and job.spec.league.publish_opponent_rows is False
    waiting = wait_for(lambda: jobs.status("league").get("league"), 60, jobs.describe)
    assert waiting["message"].startswith("no standings yet")
    frozen = snapshots(job)
    with PolicyStore(redis_server.url, job) as store:
        for step, (name, weights) in enumerate(frozen.items()):
            store.snapshot(name, weights, step=step)
        store.publish_plan(dict.fromkeys(frozen, 1.0))
        # The worker pod picks the plan up within planRefreshSeconds and records its games.
        wait_for(lambda: len(store.results()) >= 20, 120, jobs.describe)
        store.publish_matchmaker_plan(Uniform(), "main")  # the learner's round: a plan and the standings
        results = [r for _, r in store.results()]
        standings = store.publish_standings("main", results=results)
    opponents = {name for r in results for name in r.policy_returns() if name != "main"}
    assert opponents and opponents <= set(frozen)  # only the league's snapshots: never main_v1 itself
    assert standings.matches == len(results) >= 20 and standings.snapshots == 3
    assert standings.main_rating == store.ratings(results=results).rating("main")
    wait_for(lambda: (jobs.status("league").get("league") or {}).get("matches") == len(results), 60, jobs.describe)
    league = jobs.status("league")["league"]
    assert league == standings.status()  # as the learner computed them, through the API server
    assert league["top"][0]["policy"] in {"main", *frozen} and len(league["top"]) <= 5
    wide = cluster.kubectl("-n", namespace, "get", "rj", "league", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "LEAGUE" and league["message"] in wide[1]

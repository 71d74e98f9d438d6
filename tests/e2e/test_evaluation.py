"""spec.evaluation against a real API server and the test kubelet: the operator runs the
evaluation pods, they judge the learner's weights, and the job's status shows the numbers
(and the mean of the custom metrics the workers' callbacks set)."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym

from rolloutfleet.evaluation.confidence import summarize
from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec
from rolloutfleet.transport.weights import WeightPublisher
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest
from tests.evaluation_kit import ANGLE, gymnasium_return, lean_weights, leaning

SEED = 500
EPISODES = 3
REPO = Path(__file__).resolve().parents[2]


def test_evaluation_pods_judge_each_version_and_the_status_shows_it(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    evaluation = {"workers": 1, "episodes": EPISODES, "seed": SEED}
    manifest = job_manifest("judged", redis_server.url, replicas=1, evaluation=evaluation)
    # The workers' callbacks set custom metrics (their module is in tests/): steps and return_gap (always 0).
    manifest["spec"]["sampling"]["callbacks"] = "tests.integration.fleet.custom_callbacks:ReturnCheck"
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), str(REPO)) if p)
    manifest["spec"]["extraEnv"] = [{"name": "PYTHONPATH", "value": path}]
    jobs.create(manifest)

    def both_running() -> bool:
        pods = jobs.pods("judged")
        return sorted(pods) == ["judged-eval-0", "judged-worker-0"] and all(
            p["status"].get("phase") == "Running" for p in pods.values()
        )

    wait_for(both_running, 90, jobs.describe)
    pods = jobs.pods("judged")
    labels = pods["judged-eval-0"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "evaluator" and labels["rolloutfleet.io/evaluator-index"] == "0"
    env = {e["name"]: e.get("value") for e in pods["judged-eval-0"]["spec"]["containers"][0]["env"]}
    assert env["ROLLOUTFLEET_ROLE"] == "evaluator"
    wait_for(lambda: jobs.status("judged").get("evaluation", {}).get("readyWorkers") == 1, 60, jobs.describe)
    status = jobs.status("judged")
    assert status["desiredReplicas"] == 1 and status["replicas"] == 1  # the evaluation pod is no worker
    assert status["evaluation"]["message"] == "no weights version judged yet"
    custom = wait_for(lambda: jobs.status("judged").get("customMetrics"), 60, jobs.describe)
    assert set(custom) == {"steps", "return_gap"} and custom["return_gap"] == 0.0 and custom["steps"] > 0

    env_ = gym.make("CartPole-v1")
    like = Policy(PolicySpec(), env_.observation_space, env_.action_space).get_weights()
    publisher = WeightPublisher(redis_server.url, "judged", namespace)
    publisher.publish(lean_weights(like, ANGLE))
    wait_for(lambda: jobs.status("judged").get("evaluation", {}).get("version") == 1, 90, jobs.describe)
    expected = summarize(1, [gymnasium_return(SEED + i, leaning(ANGLE)) for i in range(EPISODES)])
    judged = jobs.status("judged")["evaluation"]
    assert (judged["episodes"], judged["returnMean"], judged["lengthMean"]) == (
        EPISODES, expected.return_mean, expected.length_mean)  # fmt: skip
    assert abs(judged["returnLow"] - expected.return_low) < 1e-9 and judged["message"] == expected.describe()

    publisher.publish(lean_weights(like))
    wait_for(lambda: jobs.status("judged").get("evaluation", {}).get("version") == 2, 120, jobs.describe)
    judged = jobs.status("judged")["evaluation"]
    assert (judged["returnMean"], judged["returnLow"], judged["returnHigh"]) == (500.0, 500.0, 500.0)
    wide = cluster.kubectl("-n", namespace, "get", "rj", "judged", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["EVAL", "LEAGUE"] and "version 2: return 500 ± 0 (95 % CI, 3 episodes)" in wide[1]

    # No evaluation workers wanted: the evaluation pod goes, the worker stays as it was.
    worker_uid = jobs.pods("judged")["judged-worker-0"]["metadata"]["uid"]
    jobs.patch("judged", {"evaluation": {"workers": 0}})
    wait_for(lambda: "judged-eval-0" not in jobs.pods("judged"), 60, jobs.describe)
    assert jobs.pods("judged")["judged-worker-0"]["metadata"]["uid"] == worker_uid
    assert jobs.status("judged").get("restarts", 0) == 0

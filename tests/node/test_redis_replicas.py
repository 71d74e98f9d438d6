"""The chart's Redis with a read replica (``redis.readReplicas: 1``) on the real node, with
kube-router enforcing the NetworkPolicies: the replica copies the primary over TLS, a job
that names no Redis gets the replica as ``spec.redis.readReplicas``, the operator sets the
job's users on the replica too, and the worker's pod downloads each weights version from the
replica: the replica's own ``INFO commandstats`` and ``CLIENT LIST`` say so."""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import gymnasium as gym
import pytest

from rolloutfleet.inference.policy import Policy
from rolloutfleet.spec.job import PolicySpec, RolloutJob
from rolloutfleet.transport.heartbeat import read_heartbeats
from rolloutfleet.transport.redis.acl import job_users
from rolloutfleet.transport.weights import WeightPublisher
from tests.node.nodekit import Node, chart_redis, wait_for

NS = "replicas"
RELEASE = "rolloutfleet"
JOB = "copied"
REPLICA_POD = f"{RELEASE}-redis-replica-0"
MANIFEST = {
    "apiVersion": "rolloutfleet.io/v1alpha1",
    "kind": "RolloutJob",
    "metadata": {"name": JOB, "namespace": NS},
    "spec": {"replicas": 1, "env": {"id": "CartPole-v1", "numEnvs": 2},
             "redis": {"maxLen": 50, "backpressure": "dropOldest"}},
}  # fmt: skip


def redis_cli(node: Node, pod: str, *command: str) -> str:
    """``redis-cli`` in a Redis pod of the chart, as its admin (through the real kubelet)."""
    script = 'REDISCLI_AUTH="$REDIS_PASSWORD" redis-cli --tls --cacert /etc/redis/tls/ca.crt "$@"'
    return node.kubectl("-n", NS, "exec", pod, "--", "sh", "-c", script, "redis-cli", *command)


def gets(node: Node, pod: str) -> int:
    for line in redis_cli(node, pod, "info", "commandstats").splitlines():
        if line.startswith("cmdstat_get:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def learner_url(node: Node, url: str) -> str:
    secret = node.get(NS, "secret", f"{JOB}-redis-learner")["data"]
    user, password = (base64.b64decode(secret[key]).decode() for key in ("username", "password"))
    quoted = urllib.parse.quote(user, safe=""), urllib.parse.quote(password, safe="")
    return url.replace("rediss://", f"rediss://{quoted[0]}:{quoted[1]}@", 1)


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    """The release's cluster-wide objects (its ClusterRoles) go with it: the next module installs its own."""
    yield
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)
    node.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false", check=False)


def test_a_worker_reads_its_weights_from_the_charts_read_replica(node: Node) -> None:
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace",
              "--set", "redis.readReplicas=1")  # fmt: skip
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)
    # Ready only once its link to the primary is up (its readiness probe): TLS, the password, the policy.
    node.kubectl("-n", NS, "rollout", "status", f"statefulset/{RELEASE}-redis-replica", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(MANIFEST))

    def status() -> dict[str, Any]:
        return (node.get(NS, "rj", JOB) or {}).get("status") or {}

    wait_for(lambda: status().get("readyReplicas") == 1, 240, lambda: node.diagnostics(NS))
    replica_url = f"rediss://{REPLICA_POD}.{RELEASE}-redis-replica.{NS}.svc:6379/0"
    assert status()["redisDefaults"]["readReplicas"] == [replica_url]
    worker_user = job_users(NS, JOB).worker.name  # set on the replica by the operator (ACLs are not replicated)
    wait_for(lambda: worker_user in redis_cli(node, REPLICA_POD, "acl", "users").split(), 60)

    url, _ = chart_redis(node, NS, RELEASE)
    login = learner_url(node, url)
    job = RolloutJob.from_dict(MANIFEST)
    replica_before = gets(node, REPLICA_POD)
    env = gym.make("CartPole-v1")
    weights = Policy(PolicySpec(), env.observation_space, env.action_space, seed=7).get_weights()
    seq = WeightPublisher(login, job).publish(weights)  # checked against the model the worker recorded

    def loaded() -> bool:
        beats = read_heartbeats(login, job)
        return any(int(beat.get("weights_seq_no", 0)) >= seq for beat in beats.values())

    wait_for(loaded, 120, lambda: node.diagnostics(NS))
    # Nothing but the workers' weights reads asks the replica for a key: the version and its chunk.
    assert gets(node, REPLICA_POD) - replica_before >= 2
    # The worker listens for the announcements on the replica, as its job's user.
    clients = redis_cli(node, REPLICA_POD, "client", "list").splitlines()
    assert any(f"user={worker_user}" in line and " sub=1" in line for line in clients), clients

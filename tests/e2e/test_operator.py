"""The operator end to end: real API server, real kubelet-run worker processes, real Redis.

The operator runs as a subprocess under the least-privilege user bound to
``rolloutfleet_operator.rbac.RULES`` (what the chart installs), never as admin.
"""

from __future__ import annotations

import json
import signal
import time

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest, read_batches


def test_a_job_runs_its_workers_and_batches_arrive(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    jobs.create(job_manifest("cartpole", redis_server.url, replicas=2))
    wait_for(lambda: jobs.running("cartpole", 2), 60, jobs.describe)
    assert sorted(jobs.pods("cartpole")) == ["cartpole-worker-0", "cartpole-worker-1"]
    pod = jobs.pods("cartpole")["cartpole-worker-0"]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "RolloutJob"
    security = pod["spec"]["containers"][0]["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert pod["spec"]["automountServiceAccountToken"] is False
    # Spread over nodes by default, as the API server stored it (it validates the constraint).
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"], spread["maxSkew"]) == (
        "kubernetes.io/hostname", "ScheduleAnyway", 1,
    )  # fmt: skip
    assert spread["labelSelector"]["matchLabels"]["rolloutfleet.io/job"] == "cartpole"
    read_batches(redis_server.url, "cartpole", namespace, {0, 1})
    wait_for(lambda: jobs.status("cartpole").get("phase") == "Running", 60, jobs.describe)
    status = jobs.status("cartpole")
    assert status["readyReplicas"] == 2 and status["replicas"] == 2 and status["restarts"] == 0
    assert status["observedGeneration"] == jobs.get("cartpole")["metadata"]["generation"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["observedGeneration"] == status["observedGeneration"]
    # Progress comes from the workers' heartbeats in Redis.
    wait_for(lambda: jobs.status("cartpole").get("stepsPerSecond", 0) > 0, 30, jobs.describe)
    table = cluster.kubectl("-n", namespace, "get", "rj", "cartpole").stdout.splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "READY", "PHASE", "RESTARTS", "STEPS/S", "REASON", "AGE"]
    assert table[1].split()[:5] == ["cartpole", "2", "2", "Running", "0"]


def test_a_killed_worker_is_replaced_until_the_budget_is_spent(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    jobs.create(job_manifest("crash", redis_server.url, replicas=1, restartPolicy={"maxRestarts": 1}))
    wait_for(lambda: jobs.running("crash", 1), 60, jobs.describe)
    first = read_batches(redis_server.url, "crash", namespace, {0})
    old_uid = jobs.pods("crash")["crash-worker-0"]["metadata"]["uid"]
    kubelet.kill(namespace, "crash-worker-0", signal.SIGKILL)

    def replaced() -> bool:
        pod = jobs.pods("crash").get("crash-worker-0")
        return pod is not None and pod["metadata"]["uid"] != old_uid and pod["status"].get("phase") == "Running"

    wait_for(replaced, 60, jobs.describe)
    assert read_batches(redis_server.url, "crash", namespace, {0}, old=frozenset(first))  # the replacement publishes
    status = wait_for(lambda: (s := jobs.status("crash")).get("restarts") == 1 and s, 30, jobs.describe)
    assert status["workers"]["0"]["restarts"] == 1 and status["workers"]["0"]["lastExitCode"] == 128 + signal.SIGKILL
    # The second crash spends the budget: the job fails and says why, and stops restarting.
    wait_for(lambda: kubelet.pid(namespace, "crash-worker-0"), 30)
    kubelet.kill(namespace, "crash-worker-0", signal.SIGKILL)
    status = wait_for(lambda: (s := jobs.status("crash")).get("phase") == "Failed" and s, 60, jobs.describe)
    assert status["reason"] == "RestartBudgetExhausted" and "worker(s) 0" in status["message"]
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["status"] == "True" and failed["reason"] == "RestartBudgetExhausted"
    pod = jobs.pods("crash")["crash-worker-0"]
    assert pod["status"]["phase"] == "Failed"  # kept for `kubectl logs`, not restarted
    assert jobs.status("crash")["restarts"] == 1


def test_scale_edit_suspend_and_resume(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    jobs.create(job_manifest("elastic", redis_server.url, replicas=1))
    wait_for(lambda: jobs.running("elastic", 1), 60, jobs.describe)
    cluster.kubectl("-n", namespace, "scale", "rj/elastic", "--replicas=3")
    wait_for(lambda: jobs.running("elastic", 3), 90, jobs.describe)
    keep = jobs.pods("elastic")["elastic-worker-0"]["metadata"]["uid"]
    cluster.kubectl("-n", namespace, "scale", "rj/elastic", "--replicas=1")
    wait_for(lambda: list(jobs.pods("elastic")) == ["elastic-worker-0"], 60, jobs.describe)
    assert jobs.pods("elastic")["elastic-worker-0"]["metadata"]["uid"] == keep  # the highest indexes went
    # A spec change replaces the pod with one built from the new spec.
    jobs.patch("elastic", {"env": {"id": "CartPole-v1", "numEnvs": 3}})

    def replaced() -> bool:
        pod = jobs.pods("elastic").get("elastic-worker-0")
        if pod is None or pod["metadata"]["uid"] == keep or pod["status"].get("phase") != "Running":
            return False
        spec = json.loads(
            next(e["value"] for e in pod["spec"]["containers"][0]["env"] if e["name"] == "ROLLOUTFLEET_SPEC")
        )
        return bool(spec["env"]["numEnvs"] == 3)

    wait_for(replaced, 90, jobs.describe)
    jobs.patch("elastic", {"suspend": True})
    wait_for(lambda: not jobs.pods("elastic") and jobs.status("elastic").get("phase") == "Suspended", 60, jobs.describe)
    jobs.patch("elastic", {"suspend": False})
    wait_for(lambda: jobs.running("elastic", 1), 60, jobs.describe)
    assert jobs.status("elastic")["restarts"] == 0  # nothing of this counted as a failure


def test_deleting_a_job_removes_everything(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    jobs.create(job_manifest("gone", redis_server.url, replicas=2))
    wait_for(lambda: jobs.running("gone", 2), 60, jobs.describe)
    cluster.kubectl("-n", namespace, "delete", "rj", "gone", "--wait=false")
    # The operator releases its finalizer (slow on a loaded 2-core box: kubectl's own 60 s
    # wait ran out once), then the garbage collector (kube-controller-manager) removes the
    # owned pods.
    wait_for(lambda: cluster.kubectl("-n", namespace, "get", "rj", "-o", "name").stdout.strip() == "", 120)
    wait_for(lambda: not jobs.core.list_namespaced_pod(namespace).items, 60, jobs.describe)


def test_jobs_deleted_while_their_redis_hangs_are_gone_in_seconds(
    cluster: Cluster, operators: OperatorFactory, jobs: Jobs, namespace: str
) -> None:
    """kopf keeps a deleted job's finalizer until the job's timer has returned, and a tick
    waits seconds on a Redis that hangs (each read runs into its timeout). Jobs deleted
    while their ticks hang still go within seconds; kopf's default was to look again after
    a minute. Five jobs: with that default, at least one was caught mid-tick almost always."""
    from tests.integration.redis_server import RedisServer, redis_server_binary

    names = [f"hung-{i}" for i in range(5)]
    with RedisServer(executable=redis_server_binary()) as server:
        operators.start()
        for name in names:  # no workers: the timer reads the job's Redis all the same
            jobs.create(job_manifest(name, server.url, replicas=0))
        wait_for(lambda: all(jobs.status(name).get("phase") for name in names), 60, jobs.describe)
        with server.pause():
            time.sleep(12)  # two ticks' worth: each job's timer now waits on the hung server
            for name in names:
                jobs.api.delete_namespaced_custom_object("rolloutfleet.io", "v1alpha1", namespace, "rolloutjobs", name)
            wait_for(
                lambda: cluster.kubectl("-n", namespace, "get", "rj", "-o", "name").stdout.strip() == "",
                30,
                jobs.describe,
            )


def test_an_unbuildable_env_shows_its_reason(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    manifest = job_manifest("broken", redis_server.url, replicas=1, restartPolicy={"maxRestarts": 0})
    manifest["spec"]["env"] = {"id": "NoSuchEnv-v0", "numEnvs": 1}
    jobs.create(manifest)
    status = wait_for(lambda: (s := jobs.status("broken")).get("phase") == "Failed" and s, 90, jobs.describe)
    assert "NoSuchEnv" in status["message"]
    events = cluster.kubectl("-n", namespace, "get", "events", "--field-selector", "involvedObject.name=broken").stdout
    assert "RestartBudgetExhausted" in events and "NoSuchEnv" in events


def test_operator_restart_keeps_counts_and_creates_no_duplicates(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    first = operators.start()
    jobs.create(job_manifest("steady", redis_server.url, replicas=3))
    wait_for(lambda: jobs.running("steady", 3), 90, jobs.describe)
    kubelet.kill(namespace, "steady-worker-1", signal.SIGKILL)
    wait_for(lambda: jobs.status("steady").get("restarts") == 1 and jobs.running("steady", 3), 60, jobs.describe)
    uids = {name: pod["metadata"]["uid"] for name, pod in jobs.pods("steady").items()}
    first.stop(signal.SIGKILL)  # no chance to clean up
    operators.start()
    # The new operator acts (a scale-up needs it) without touching what exists.
    cluster.kubectl("-n", namespace, "scale", "rj/steady", "--replicas=4")
    wait_for(lambda: jobs.running("steady", 4), 90, jobs.describe)
    pods = jobs.pods("steady")
    assert {name: pods[name]["metadata"]["uid"] for name in uids} == uids
    assert len(pods) == 4 and jobs.status("steady")["restarts"] == 1


def test_two_operator_replicas_one_acts(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "rolloutfleet", "namespace": namespace},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(peering))
    a, b = operators.start(standalone=False), operators.start(standalone=False)
    paused = wait_for(
        lambda: [o for o in (a, b) if "Pausing operations in favour of" in o.text()],
        60,
        lambda: a.text()[-2000:] + b.text()[-2000:],
    )
    assert len(paused) == 1
    jobs.create(job_manifest("ha", redis_server.url, replicas=2))
    wait_for(lambda: jobs.running("ha", 2), 60, jobs.describe)
    active = b if paused[0] is a else a
    active.stop(signal.SIGKILL)  # the standby takes over once the keep-alive expires
    jobs.patch("ha", {"replicas": 1})
    wait_for(lambda: list(jobs.pods("ha")) == ["ha-worker-0"], 120, jobs.describe)


def test_the_operator_user_has_only_what_it_needs(cluster: Cluster, operator_rbac: str) -> None:
    def can(*args: str) -> str:
        return cluster.kubectl(
            "auth", "can-i", *args, check=False, kubeconfig=cluster.operator_kubeconfig
        ).stdout.strip()

    assert can("create", "pods", "-n", "default") == "yes"
    assert can("patch", "rolloutjobs.rolloutfleet.io/status", "-n", "default") == "yes"
    assert can("create", "poddisruptionbudgets.policy", "-n", "default") == "yes"
    assert can("patch", "poddisruptionbudgets.policy", "-n", "default") == "yes"
    assert can("create", "services", "-n", "default") == "yes"  # an external env's Service
    assert can("patch", "services", "-n", "default") == "yes"
    assert can("create", "secrets", "-n", "default") == "yes"  # a job's <job>-redis-worker/-learner
    assert can("patch", "secrets", "-n", "default") == "yes"
    for verb, resource in [
        ("delete", "poddisruptionbudgets.policy"),
        ("update", "poddisruptionbudgets.policy"),
        ("delete", "services"),
        ("get", "services"),
        ("get", "nodes"),
        ("update", "pods"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("update", "secrets"),
        ("delete", "secrets"),  # the garbage collector deletes a job's Secrets, by owner reference
        ("create", "deployments"),
        ("delete", "rolloutjobs.rolloutfleet.io"),
        ("create", "rolebindings"),
    ]:
        assert can(verb, resource, "-n", "default") == "no", f"{verb} {resource}"


def test_a_job_on_a_redis_cluster_spreads_over_its_masters_and_reports_progress(
    cluster: Cluster, kubelet: LocalKubelet, operators: OperatorFactory, jobs: Jobs, namespace: str
) -> None:
    """The job's URL names one node of a Redis Cluster, nothing else: workers find the
    cluster, write one shard per master, and the operator reads their heartbeats from it."""
    from rolloutfleet.transport.consumer import BatchConsumer
    from tests.integration.redis_cluster import LocalCluster

    with LocalCluster(masters=3, replicas=0) as redis_cluster:
        operators.start()
        jobs.create(job_manifest("spread", redis_cluster.url, replicas=3))
        wait_for(lambda: jobs.running("spread", 3), 90, jobs.describe)
        read_batches(redis_cluster.url, "spread", namespace, {0, 1, 2})
        consumer = BatchConsumer(redis_cluster.url, "spread", namespace=namespace, group="e2e")
        # One shard per master (the default), each stream on its own master.
        assert len(consumer.shards) == 3
        assert len({redis_cluster.master_of(shard.keys.batches) for shard in consumer.shards}) == 3
        # the operator reads heartbeats on its timer; on a loaded 2-core CI machine the first rate can take a while
        wait_for(lambda: jobs.status("spread").get("stepsPerSecond", 0) > 0, 180, jobs.describe)
        status = jobs.status("spread")
        assert status["readyReplicas"] == 3 and status["restarts"] == 0
        jobs.api.delete_namespaced_custom_object("rolloutfleet.io", "v1alpha1", namespace, "rolloutjobs", "spread")
        wait_for(lambda: not jobs.pods("spread"), 60, jobs.describe)

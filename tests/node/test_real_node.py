"""The README's Kubernetes quickstart, verbatim, on a real node, then what only a real
node decides: containers killed, OOM kills, probes, termination messages, drains,
and what the pods can do from inside.

The tests run in file order against one Helm release in namespace ``rl``: each starts
from the state the previous one left (the quickstart's job running).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rolloutfleet import BatchConsumer
from tests.node.nodekit import Node, kernel_oom_kills, wait_for

NS = "rl"
JOB = "cartpole"
RELEASE = "rolloutfleet"


def job_status(node: Node, name: str = JOB) -> dict[str, Any]:
    job = node.get(NS, "rj", name)
    return (job or {}).get("status") or {}


def worker_pods(node: Node, job: str = JOB) -> list[dict[str, Any]]:
    pods = node.get(NS, "pods", "-l", f"rolloutfleet.io/job={job}") or {"items": []}
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def redis_url_and_password(node: Node) -> tuple[str, str]:
    service = node.get(NS, "service", "rolloutfleet-redis")
    secret = node.get(NS, "secret", "rolloutfleet-redis")
    password = base64.b64decode(secret["data"]["password"]).decode()
    # The chart's Redis serves TLS: the host verifies it with the chart's CA (Secret
    # rolloutfleet-redis-ca). The Service's virtual address, reached from the host through
    # kube-proxy's rules, is not among the certificate's names (the Service's DNS names
    # are): the chain is verified, the host name not.
    ca = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis-ca")["data"]["ca.crt"])
    ca_file = Path(tempfile.gettempdir()) / "rolloutfleet-node-redis-ca.crt"
    ca_file.write_bytes(ca)
    address = service["spec"]["clusterIP"]
    return f"rediss://{address}:6379/0?ssl_ca_certs={ca_file}&ssl_check_hostname=false", password


def in_container(node: Node, pod: str, code: str) -> Any:
    """Run Python inside the pod's container (kubectl exec, through the real kubelet)."""
    out = node.kubectl("-n", NS, "exec", pod, "--", "python3", "-c", code)
    return json.loads(out.strip().splitlines()[-1])


CONTAINER_FACTS = """
import json, os
facts = {"uid": os.getuid(), "gid": os.getgid()}
try:
    open("/probe-write", "w")
    facts["root_writable"] = True
except OSError as error:
    facts["root_writable"] = error.strerror
facts["tmp_writable"] = os.access("/tmp", os.W_OK)
facts["token"] = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
facts["service_host"] = os.environ.get("KUBERNETES_SERVICE_HOST")
facts["nameserver"] = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
facts["no_new_privs"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0]
facts["cap_eff"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
print(json.dumps(facts))
"""


# --- the README's quickstart, verbatim -----------------------------------------------------


def test_helm_install_without_overrides(node: Node) -> None:
    out = node.helm("install", "rolloutfleet", "charts/rolloutfleet", "-n", "rl", "--create-namespace")
    assert "STATUS: deployed" in out
    # The operator in its own pod, from our image, talking to the API server through the
    # `kubernetes` Service with its ServiceAccount: the rollout finishing means the real
    # readiness probe (kopf's /healthz) answered.
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)


def test_apply_example_runs(node: Node) -> None:
    # The README's order: the job first, the learner later. Its steps/s are looked at once
    # a learner reads (test_learner_consumes_batches): a fleet waiting for one samples nothing.
    node.kubectl("-n", "rl", "apply", "-f", "charts/rolloutfleet/examples/cartpole.yaml")

    def running() -> dict[str, Any] | None:
        status = job_status(node)
        return status if status.get("phase") == "Running" and status.get("readyReplicas") == 2 else None

    wait_for(running, 300, lambda: node.diagnostics(NS))
    table = node.kubectl("-n", "rl", "get", "rj").splitlines()
    assert table[0].split() == ["NAME", "DESIRED", "READY", "PHASE", "RESTARTS", "STEPS/S", "REASON", "AGE"]
    name, desired, ready, phase, restarts = table[1].split()[:5]
    assert (name, desired, ready, phase, restarts) == ("cartpole", "2", "2", "Running", "0")
    # Every worker pod is Ready by its own /readyz, as the real kubelet probed it.
    for pod in worker_pods(node):
        assert pod_ready(pod)
        assert pod["status"]["podIP"].startswith(node.facts["NODE_IP"].rsplit(".", 1)[0] + ".")


def test_a_job_without_redis_in_another_namespace_is_ready_and_publishing(node: Node) -> None:
    """The minimal manifest: no redis section, in a namespace that is not the chart's. It gets
    the chart's TLS Redis, the chart's CA copied next to it and Redis users of its own."""
    import redis

    from rolloutfleet.transport.redis.keys import job_keys

    # The quickstart's job (the release's namespace) names no Redis either.
    assert job_status(node)["redisDefaults"] == {"url": "rediss://rolloutfleet-redis.rl.svc:6379/0",
                                                  "caSecret": "cartpole-redis-ca"}  # fmt: skip
    other = "team-minimal"
    node.kubectl("create", "namespace", other)
    manifest = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": "minimal"},
                "spec": {"replicas": 1, "env": {"id": "CartPole-v1"},
                         "resources": {"cpu": "250m", "memory": "256Mi"}}}  # fmt: skip
    node.kubectl("-n", other, "apply", "-f", "-", input=json.dumps(manifest))

    def ready() -> dict[str, Any] | None:
        status = (node.get(other, "rj", "minimal") or {}).get("status") or {}
        return status if status.get("readyReplicas") == 1 else None

    status = wait_for(ready, 300, lambda: node.diagnostics(other))
    assert status["redisDefaults"] == {"url": "rediss://rolloutfleet-redis.rl.svc:6379/0",
                                       "caSecret": "minimal-redis-ca"}  # fmt: skip
    isolated = next(c for c in status["conditions"] if c["type"] == "RedisIsolated")
    assert (isolated["status"], isolated["reason"]) == ("True", "PerJobUsers"), isolated
    ca = node.get(other, "secret", "minimal-redis-ca")
    assert (
        set(ca["data"]) == {"ca.crt"}
        and ca["data"]["ca.crt"] == node.get(NS, "secret", "rolloutfleet-redis-ca")["data"]["ca.crt"]
    )
    url, password = redis_url_and_password(node)
    admin = redis.Redis.from_url(url, password=password)
    batches = job_keys(other, "minimal").batches
    wait_for(lambda: admin.exists(batches) and admin.xlen(batches) > 0, 180, lambda: node.diagnostics(other))
    node.kubectl("delete", "namespace", other, "--timeout=180s", timeout=190)


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def waiting_for_learner(status: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == "WaitingForLearner"), None)


@pytest.mark.timeout(570)  # 150 s watched, after the fleet's start and before the replacement's
def test_no_learner_yet_the_fleet_stays_ready_waiting_for_one(node: Node) -> None:
    """150 s with no learner (the chart example: block, maxLen 64, blockTimeoutSeconds 60, so
    two timeouts and more): Ready, WaitingForLearner; a worker killed meanwhile is
    replaced (restartPolicy Never: the operator makes a new pod) and comes back Ready
    though the stream is full."""

    def waiting() -> dict[str, Any] | None:
        status = job_status(node)
        condition = waiting_for_learner(status)
        ok = status.get("readyReplicas") == 2 and condition is not None and condition["status"] == "True"
        return status if ok and "2/2 workers waiting" in condition["message"] else None

    status = wait_for(waiting, 300, lambda: node.diagnostics(NS))
    since = waiting_for_learner(status)["lastTransitionTime"]  # type: ignore[index]
    assert "rolloutfleet:{rl/cartpole}:batches" in status["message"]
    row = node.kubectl("-n", NS, "get", "rj", JOB).splitlines()[1].split()
    assert row[:4] == [JOB, "2", "2", "Running"] and "WaitingForLearner" in row
    restarts = status.get("restarts", 0)
    started = time.monotonic()

    def still_ready_and_waiting() -> None:
        status = job_status(node)
        condition = waiting_for_learner(status)
        assert (status["phase"], status["reason"], status["readyReplicas"]) == ("Running", "WaitingForLearner", 2)
        assert condition is not None and condition["lastTransitionTime"] == since, status
        pods = worker_pods(node)
        assert len(pods) == 2 and all(pod_ready(p) for p in pods), [p["status"] for p in pods]
        assert all(p["status"]["containerStatuses"][0]["restartCount"] == 0 for p in pods)

    while time.monotonic() - started < 75:  # past one block timeout
        still_ready_and_waiting()
        time.sleep(10)

    pod = next(p for p in worker_pods(node) if p["metadata"]["name"] == f"{JOB}-worker-1")
    os.kill(container_pid(node, pod), signal.SIGKILL)

    def replaced_and_ready() -> dict[str, Any] | None:
        for p in worker_pods(node):
            if p["metadata"]["name"] == f"{JOB}-worker-1" and p["metadata"]["uid"] != pod["metadata"]["uid"]:
                return p if pod_ready(p) else None
        return None

    wait_for(replaced_and_ready, 180, lambda: node.diagnostics(NS))
    wait_for(lambda: "2/2 workers waiting" in job_status(node).get("message", ""), 120, lambda: node.diagnostics(NS))
    assert job_status(node)["restarts"] == restarts + 1  # a crash, counted once
    while time.monotonic() - started < 150:
        still_ready_and_waiting()
        time.sleep(10)


class Learner(threading.Thread):
    """A learner on the host, reading the job's batches through the Redis Service for the
    rest of the module, as a user's would: with ``backpressure: block`` a fleet with no
    learner stops once the stream is full, ready, waiting for one."""

    def __init__(self, node: Node) -> None:
        super().__init__(daemon=True)
        url, password = redis_url_and_password(node)
        self.consumer = BatchConsumer(url, JOB, namespace=NS, password=password)
        self.first: list[Any] = []
        self.rows = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            batch = self.consumer.get(timeout=2.0)
            if batch is not None and len(batch):
                self.rows += len(batch)
                if len(self.first) < 3:
                    self.first.append(batch)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.consumer.commit()
        self.consumer.close()


LEARNER: list[Learner] = []


def test_learner_consumes_batches(node: Node) -> None:
    learner = Learner(node)
    LEARNER.append(learner)
    learner.start()
    wait_for(lambda: len(learner.first) == 3, 120, lambda: node.diagnostics(NS))

    def sampling() -> dict[str, Any] | None:
        status = job_status(node)
        condition = waiting_for_learner(status)
        ended = condition is not None and condition["status"] == "False"
        return status if ended and (status.get("stepsPerSecond") or 0) > 0 else None

    status = wait_for(sampling, 120, lambda: node.diagnostics(NS))
    assert (status["phase"], status["reason"], status["readyReplicas"]) == ("Running", "AllWorkersReady", 2)
    steps = node.kubectl("-n", NS, "get", "rj", JOB).splitlines()[1].split()[5]
    assert float(steps) > 0
    for batch in learner.first:
        # Whole fragments: 8 CartPoles x 200 steps each (the example's numEnvs and
        # rolloutFragmentLength); get() hands over every fragment waiting.
        assert len(batch["obs"]) > 0 and len(batch["obs"]) % (8 * 200) == 0
        assert batch["obs"].shape[1:] == (4,)
        assert set(np.unique(batch["actions"])) <= {0, 1}
        # CartPole pays 1 per step; an episode ends once |x| > 2.4 or |theta| > 0.2095, so a
        # row that did not end lies inside those bounds.
        assert np.all(batch["rewards"] == 1.0)
        alive = ~(batch["terminateds"] | batch["truncateds"])
        assert np.all(np.abs(batch["new_obs"][alive, 0]) <= 2.4)
        assert np.all(np.abs(batch["new_obs"][alive, 2]) <= 0.2095)
        assert set(np.unique(batch["env_id"])) <= set(range(8))


# --- from inside the containers --------------------------------------------------------------


def test_pods_are_non_root_read_only_without_token(node: Node) -> None:
    pod = worker_pods(node)[0]["metadata"]["name"]
    facts = in_container(node, pod, CONTAINER_FACTS)
    assert (facts["uid"], facts["gid"]) == (10001, 10001)
    assert facts["root_writable"] == "Read-only file system"
    assert facts["tmp_writable"] is True
    assert facts["token"] is False  # automountServiceAccountToken: false
    assert facts["no_new_privs"] == "1"  # allowPrivilegeEscalation: false
    assert int(facts["cap_eff"], 16) == 0  # capabilities: drop ALL
    assert facts["nameserver"] == ["10.0.0.10"]  # the cluster DNS Service

    operator = node.get(NS, "pods", "-l", "app.kubernetes.io/component=operator")["items"][0]["metadata"]["name"]
    facts = in_container(node, operator, CONTAINER_FACTS)
    assert (facts["uid"], facts["root_writable"]) == (10001, "Read-only file system")
    # The operator needs its ServiceAccount's token, and reaches the API server through
    # the `kubernetes` Service's virtual address.
    assert facts["token"] is True
    assert facts["service_host"] == "10.0.0.1"

    redis = node.get(NS, "pods", "-l", "app.kubernetes.io/component=redis")["items"][0]["metadata"]["name"]
    out = node.kubectl(
        "-n",
        NS,
        "exec",
        redis,
        "--",
        "sh",
        "-c",
        "id -u; touch /x 2>&1; test -e /var/run/secrets/kubernetes.io/serviceaccount/token && echo token || echo no-token",
    )
    lines = out.strip().splitlines()
    assert lines[0] == "999"
    assert "Read-only file system" in lines[1]
    assert lines[-1] == "no-token"


# --- what the node does to containers ----------------------------------------------------------


def container_pid(node: Node, pod: dict[str, Any]) -> int:
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    for line in node.ctr("tasks", "ls").splitlines()[1:]:
        task, pid, _status = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task {container_id} in containerd")


def test_sigkilled_worker_is_replaced_and_counted_once(node: Node) -> None:
    pod = next(p for p in worker_pods(node) if p["metadata"]["name"] == f"{JOB}-worker-0")
    before = job_status(node).get("restarts", 0)
    pid = container_pid(node, pod)
    os.kill(pid, signal.SIGKILL)

    def replaced() -> dict[str, Any] | None:
        for p in worker_pods(node):
            if p["metadata"]["name"] == f"{JOB}-worker-0" and p["metadata"]["uid"] != pod["metadata"]["uid"]:
                ready = any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                return p if ready else None
        return None

    wait_for(replaced, 180, lambda: node.diagnostics(NS))
    status = job_status(node)
    assert status["restarts"] == before + 1
    record = status["workers"]["0"]
    # The real kubelet's words for a SIGKILLed process: exit code 137, reason Error.
    assert "137" in record["lastError"]
    time.sleep(10)  # a second look: the failure is not counted again by later events
    assert job_status(node)["restarts"] == before + 1


def apply_job(node: Node, name: str, spec: dict[str, Any]) -> None:
    url = "rediss://rolloutfleet-redis:6379/0"  # the chart's Redis serves TLS; its CA in rolloutfleet-redis-ca
    tls = {"caSecret": {"name": "rolloutfleet-redis-ca"}}
    base: dict[str, Any] = {
        "replicas": 1,
        "env": {"id": "CartPole-v1", "numEnvs": 2},
        "redis": {
            "url": url,
            "passwordSecret": {"name": "rolloutfleet-redis", "key": "password"},
            "maxLen": 8,
            "tls": tls,
        },
        "resources": {"cpu": "250m", "memory": "1Gi"},
        "restartPolicy": {"maxRestarts": 0},
    }
    for key, value in spec.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    manifest = {
        "apiVersion": "rolloutfleet.io/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": name},
        "spec": base,
    }
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(manifest))


def failed_status(node: Node, name: str) -> dict[str, Any] | None:
    status = job_status(node, name)
    return status if status.get("phase") == "Failed" else None


def liveness_kills(node: Node, uids: set[str]) -> list[str]:
    """The kubelet's own Events for these pods saying it killed a container on its liveness probe."""
    events = node.get(NS, "events", "--field-selector", "reason=Killing") or {"items": []}
    return [e["message"] for e in events["items"]
            if e["involvedObject"].get("uid") in uids and "liveness probe" in e.get("message", "")]  # fmt: skip


def test_worker_over_its_memory_limit_is_oom_killed(node: Node) -> None:
    # 16Mi cannot hold the interpreter with numpy and our package: the anonymous memory of the
    # imports alone passes it, which no eviction of file pages can make up for, so the kernel
    # kills it within a second of start (a torch policy needs ~200 MB more). Nearer the need it
    # is a coin toss: at 24Mi the worker was killed by the kernel at ~23.8 MB of anonymous
    # memory in some runs, and in others stayed just under the limit, thrashed its file pages
    # and was killed by its liveness probe; at 128-200Mi it crawls for minutes until the probe
    # kills it (137, reason Error). The pod's cgroup has the same limit as the container's and
    # also holds the pause container, so the kernel may kill at the pod's level
    # (oom_memcg=/kubepods/pod<uid>); containerd then sees no OOM event for the container and
    # reports 137, Error. The witnesses are the kernel's log, or the kubelet's probe Event.
    apply_job(node, "oom", {"resources": {"memory": "16Mi"}, "policy": {"inference": "torch", "device": "cpu"}})
    status = wait_for(lambda: failed_status(node, "oom"), 180, lambda: node.diagnostics(NS))
    record = status["workers"]["0"]
    assert "137" in record["lastError"], record
    uids = {p["metadata"]["uid"] for p in node.get(NS, "pods", "-l", "rolloutfleet.io/job=oom")["items"]}
    assert uids, "the failed worker's pod was not kept"
    killed, probed = kernel_oom_kills(uids), liveness_kills(node, uids)
    assert killed or probed, f"neither the kernel's log nor the kubelet says why pods {uids} were killed: {record}"
    if "OOMKilled" in record["lastError"]:
        assert killed and "OOMKilled" in status["message"], status
    else:  # 137, Error: the causes named, the kernel's OOM killer first
        assert "SIGKILL" in record["lastError"] and "out-of-memory" in status["message"], status
    node.kubectl("-n", NS, "delete", "rj", "oom", "--wait=true", "--timeout=60s")


def test_termination_message_reaches_the_job_status(node: Node) -> None:
    apply_job(node, "noenv", {"env": {"id": "NoSuchEnv-v0"}})
    status = wait_for(lambda: failed_status(node, "noenv"), 180, lambda: node.diagnostics(NS))
    record = status["workers"]["0"]
    # The worker's one line, written to /dev/termination-log, read back by the kubelet.
    assert "exited with code 3" in record["lastError"], record
    # gymnasium's own words for an unknown id name it without its version.
    assert "Environment `NoSuchEnv` doesn't exist" in record["lastError"], record
    pods = node.get(NS, "pods", "-l", "rolloutfleet.io/job=noenv")["items"]
    terminated = [p["status"]["containerStatuses"][0]["state"].get("terminated") for p in pods]
    assert any(t and "NoSuchEnv" in t.get("message", "") and t["exitCode"] == 3 for t in terminated), terminated
    node.kubectl("-n", NS, "delete", "rj", "noenv", "--wait=true", "--timeout=60s")


def test_a_deleted_worker_publishes_the_fragment_in_hand_then_exits_and_counts_a_disruption(node: Node) -> None:
    """`kubectl delete pod`: SIGTERM from the real kubelet mid-fragment (one CartPole, 10 000
    steps a fragment: a second or two to sample; a CI machine loaded ~7x took 100 s for 100 000,
    past the 30 s grace period), the worker finishes that fragment, publishes it
    within the grace period and exits 0; the operator counts a disruption, not a restart."""
    import redis

    apply_job(node, "stopper", {"env": {"numEnvs": 1}, "sampling": {"rolloutFragmentLength": 10_000}})
    wait_for(lambda: job_status(node, "stopper").get("readyReplicas") == 1, 180, lambda: node.diagnostics(NS))
    url, password = redis_url_and_password(node)
    client: Any = redis.Redis.from_url(url, password=password)
    stream = "rolloutfleet:{rl/stopper}:batches"

    def entries() -> list[dict[bytes, bytes]]:
        return [fields for _, fields in client.xrange(stream)]

    first = wait_for(lambda: entries() or None, 120, lambda: node.diagnostics(NS))[0]
    producer = first[b"producer"]
    pod = "stopper-worker-0"
    logs = subprocess.Popen(
        [node.facts["KUBECTL"], "-n", NS, "logs", "-f", pod],
        env={**os.environ, "KUBECONFIG": node.kubeconfig},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        time.sleep(1.0)  # into the next fragment
        asked = time.time()
        node.kubectl("-n", NS, "delete", "pod", pod, "--wait=true", "--timeout=60s", timeout=90)
        out, _ = logs.communicate(timeout=30)
    finally:
        logs.kill()
    assert "finishing the current fragment" in out and "stopped cleanly" in out, out[-2000:]
    assert "dropped one fragment" not in out and "dropping" not in out, out[-2000:]
    # Its own account of the stop: every row it sampled, published (the fragment in hand included).
    tally = re.search(r"stopping: (\d+) rows sampled: (\d+) published, (\d+) dropped", out)
    assert tally is not None and tally[1] == tally[2] and tally[3] == "0", out[-2000:]
    after = [f for f in entries() if f[b"producer"] == producer and float(f[b"created_at"]) >= asked]
    assert after, "no fragment published after the delete"  # the last: the one in hand at the signal
    assert int(after[-1][b"env_steps"]) == 10_000  # whole: sampled to its end after the signal
    status = wait_for(lambda: (s := job_status(node, "stopper")).get("disruptions", {}).get("Deleted") == 1 and s, 60)
    assert status["restarts"] == 0, status
    # Its replacement finishes the fragment in hand on SIGTERM too: up to its grace period.
    node.kubectl("-n", NS, "delete", "rj", "stopper", "--wait=true", "--timeout=120s", timeout=150)


def test_readiness_follows_the_real_probe(node: Node) -> None:
    # Nothing listens on 6390: the worker runs, retries, and its /readyz says not ready.
    apply_job(node, "unready", {"redis": {"url": "rediss://rolloutfleet-redis:6390/0"}})

    def running_unready() -> list[dict[str, Any]] | None:
        pods = [p for p in worker_pods(node, "unready") if p["status"].get("phase") == "Running"]
        return pods or None

    wait_for(running_unready, 120, lambda: node.diagnostics(NS))
    time.sleep(15)  # three probe periods
    pod = worker_pods(node, "unready")[0]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # not crash-looping
    assert job_status(node, "unready").get("readyReplicas", 0) == 0
    # Pointed at the right port, the same job becomes ready.
    apply_job(node, "unready", {"redis": {"url": "rediss://rolloutfleet-redis:6379/0"}})
    wait_for(lambda: job_status(node, "unready").get("readyReplicas") == 1, 180, lambda: node.diagnostics(NS))
    node.kubectl("-n", NS, "delete", "rj", "unready", "--wait=true", "--timeout=60s")


def test_drain_respects_the_budget_and_counts_disruptions_not_restarts(node: Node) -> None:
    """One node: the drain evicts maxUnavailable (25 % of 2, rounded up: 1) worker, whose
    replacement waits with the scheduler's reason on the cordoned node; the job's
    PodDisruptionBudget then refuses the other eviction until the node is uncordoned. The
    eviction is a disruption (status.disruptions.Evicted), not a restart."""
    name = node.facts["NODE_NAME"]
    before = job_status(node)
    evicted = (before.get("disruptions") or {}).get("Evicted", 0)
    out = node.kubectl(
        "drain", name, "--pod-selector", f"rolloutfleet.io/job={JOB}", "--delete-emptydir-data",
        "--ignore-daemonsets", "--timeout=60s", check=False, timeout=90,
    )  # fmt: skip
    try:
        assert "disruption budget" in out, out  # kubectl's words for the API server's 429

        def waiting() -> dict[str, Any] | None:
            status = job_status(node)
            return status if "Unschedulable" in status.get("message", "") else None

        status = wait_for(waiting, 120, lambda: node.diagnostics(NS))
        assert "unschedulable" in status["message"], status["message"]
        assert status["disruptions"]["Evicted"] == evicted + 1 and status["restarts"] == before["restarts"], status
        assert status.get("readyReplicas") == 1  # the budget kept the other worker sampling
        budget = node.get(NS, "pdb", f"{JOB}-workers")
        assert budget["metadata"]["ownerReferences"][0]["kind"] == "RolloutJob"
    finally:
        node.kubectl("uncordon", name)
    wait_for(lambda: job_status(node).get("readyReplicas") == 2, 240, lambda: node.diagnostics(NS))
    assert job_status(node)["restarts"] == before["restarts"]


def test_scale_suspend_resume(node: Node) -> None:
    node.kubectl("-n", NS, "scale", f"rj/{JOB}", "--replicas", "1")
    wait_for(lambda: [p["metadata"]["name"] for p in worker_pods(node)] == [f"{JOB}-worker-0"], 120)
    node.kubectl("-n", NS, "patch", "rj", JOB, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_for(lambda: not worker_pods(node) and job_status(node).get("phase") == "Suspended", 120)
    node.kubectl("-n", NS, "patch", "rj", JOB, "--type=merge", "-p", '{"spec":{"suspend":false,"replicas":2}}')
    wait_for(lambda: job_status(node).get("readyReplicas") == 2, 240, lambda: node.diagnostics(NS))


def test_helm_upgrade_keeps_jobs_and_password(node: Node) -> None:
    _, password = redis_url_and_password(node)
    old = node.get(NS, "pods", "-l", "app.kubernetes.io/component=operator")["items"][0]["metadata"]["uid"]
    node.helm("upgrade", RELEASE, "charts/rolloutfleet", "-n", NS, "--set", "operator.logLevel=debug")
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    pods = node.get(NS, "pods", "-l", "app.kubernetes.io/component=operator")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["uid"] for p in live] != [old]
    assert redis_url_and_password(node)[1] == password  # the generated password survives upgrades
    # The new operator takes the job over: still Running, nothing restarted for it.
    restarts = job_status(node)["restarts"]
    time.sleep(10)
    assert job_status(node)["phase"] == "Running"
    assert job_status(node)["restarts"] == restarts


def test_a_worker_of_one_job_gets_noperm_for_anything_outside_its_job(node: Node) -> None:
    """issue 28: from inside a worker container of A (kubectl exec), with A's worker user."""
    import redis

    from rolloutfleet.transport.redis.keys import job_keys
    from tests.node.tenants_kit import secret_values, tries_from_worker

    status = job_status(node)
    isolated = next(c for c in status["conditions"] if c["type"] == "RedisIsolated")
    assert (isolated["status"], isolated["reason"]) == ("True", "PerJobUsers"), isolated
    other = {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": "other"},
             "spec": {"suspend": True, "env": {"id": "CartPole-v1"},
                      "redis": {"url": "rediss://rolloutfleet-redis:6379/0",
                                "tls": {"caSecret": {"name": "rolloutfleet-redis-ca"}}}}}  # fmt: skip
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(other))
    wait_for(lambda: secret_values(node, NS, "other-redis-learner") or None, 120, lambda: node.diagnostics(NS))
    for role in ("worker", "learner"):
        [owner] = node.get(NS, "secret", f"{JOB}-redis-{role}")["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("RolloutJob", JOB)
    url, admin_password = redis_url_and_password(node)
    admin = redis.Redis.from_url(url, password=admin_password)
    admin.xadd(job_keys(NS, "other").batches, {"x": "b's"})
    pod = worker_pods(node)[0]
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["ROLLOUTFLEET_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == f"{JOB}-redis-worker"
    tries = tries_from_worker(node, NS, pod["metadata"]["name"], JOB, "other")
    refused = {k for k, v in tries.items() if v.startswith("NOPERM")}
    assert refused == {"append to B's stream", "read B's stream", "publish A's weights", "FLUSHALL",
                       "CONFIG GET", "KEYS *"}, tries  # fmt: skip
    assert tries["read A's weights"] == "ok" and admin.xlen(job_keys(NS, "other").batches) == 1
    # A's learner user, over TLS verified with the chart's CA, trains on A and cannot read B.
    learner = secret_values(node, NS, f"{JOB}-redis-learner")
    assert url.startswith("rediss://"), url
    user_url = url.replace("rediss://", f"rediss://{urllib.parse.quote(learner['username'], safe='')}@")
    consumer = BatchConsumer(user_url, JOB, namespace=NS, group="tenant-check", password=learner["password"])
    wait_for(lambda: consumer.get(timeout=2.0) is not None, 120, lambda: node.diagnostics(NS))
    consumer.close()
    as_learner = redis.Redis.from_url(url, username=learner["username"], password=learner["password"])
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_learner.xrange(job_keys(NS, "other").batches)
    node.kubectl("-n", NS, "delete", "rj", "other", "--timeout=120s", timeout=130)


def test_no_password_in_any_log_status_event_argv_or_client_name(node: Node) -> None:
    import redis

    from tests.node.tenants_kit import client_names, secrets_of, where_passwords_must_not_be

    passwords = secrets_of(node, NS)
    assert len(passwords) >= 3, "the chart's Redis password and the job's two users' passwords"
    url, admin_password = redis_url_and_password(node)
    texts = where_passwords_must_not_be(node, NS)
    texts["redis client names"] = client_names(redis.Redis.from_url(url, password=admin_password))
    leaks = [where for where, text in texts.items() for p in passwords if p in text]
    assert not leaks, leaks


def test_delete_job_garbage_collects_pods_then_uninstall(node: Node) -> None:
    while LEARNER:
        learner = LEARNER.pop()
        learner.stop()
        assert learner.rows > 0
    node.kubectl("-n", NS, "delete", "rj", JOB, "--timeout=120s", timeout=130)
    wait_for(lambda: not worker_pods(node), 120, lambda: node.diagnostics(NS))
    # Jobs carry the operator's finalizer: delete them all while it runs (the README's rule).
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", timeout=130)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", timeout=150)

    def gone() -> bool:
        pods = node.get(NS, "pods") or {"items": []}
        return not pods["items"]

    wait_for(gone, 120, lambda: node.diagnostics(NS))
    # Nothing of the release is left (the namespace's own kube-root-ca.crt and default
    # ServiceAccount are the cluster's, not ours).
    left = node.get(NS, "deploy,sts,svc,cm,sa,role,rolebinding,pdb", "-l", f"app.kubernetes.io/instance={RELEASE}")
    assert left["items"] == [], [item["metadata"]["name"] for item in left["items"]]
    assert (
        node.get("default", "clusterrole,clusterrolebinding", "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        == []
    )
    # Kept on purpose: the CRD (Helm never deletes crds/) and the generated password.
    assert node.get("default", "crd", "rolloutjobs.rolloutfleet.io") is not None
    assert node.get(NS, "secret", "rolloutfleet-redis") is not None


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    while LEARNER:
        LEARNER.pop().stop()
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=60s", check=False, timeout=70)
    node.helm("uninstall", RELEASE, "-n", NS, check=False)

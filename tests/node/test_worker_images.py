"""The slim and the full worker image on a real node: the operator picks one per job, the
kubelet runs what it picked, and a job the slim image cannot serve says so once, not in a loop.

One Helm release (``rolloutfleet`` in namespace ``img``, after test_real_node.py uninstalled its
own) with the chart's defaults: the chart's CartPole example (numpy policies) next to the same
job with ``policy.inference: torch``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import redis

from rolloutfleet.transport.redis.keys import job_keys
from tests.node.nodekit import REPO, Node, chart_app_version, wait_for

NS = "img"
RELEASE = "rolloutfleet"
REGISTRY = "ghcr.io/rolloutfleet"


FULL = f"{REGISTRY}/worker:{chart_app_version()}"
SLIM = f"{FULL}-slim"


def podman_id(ref: str) -> str:
    """The ID of the image `make images` built (its config digest): what containerd runs."""
    out = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"CONTAINERS_CONF": str(REPO / "hack" / "images" / "containers.conf"), "PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    return out.removeprefix("sha256:")


def status(node: Node, name: str) -> dict[str, Any]:
    return (node.get(NS, "rj", name) or {}).get("status") or {}


def pods(node: Node, job: str) -> list[dict[str, Any]]:
    found = node.get(NS, "pods", "-l", f"rolloutfleet.io/job={job}") or {"items": []}
    return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def cartpole(name: str, policy: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """The chart's CartPole example (verbatim spec) under ``name``, with ``policy`` merged in."""
    import yaml

    example = yaml.safe_load((REPO / "charts" / "rolloutfleet" / "examples" / "cartpole.yaml").read_text())
    example["metadata"]["name"] = name
    example["spec"]["policy"] = {**example["spec"]["policy"], **policy}
    example["spec"].update(spec)
    return dict(example)


def apply(node: Node, manifest: dict[str, Any]) -> None:
    node.kubectl("-n", NS, "apply", "-f", "-", input=json.dumps(manifest))


def redis_client(node: Node) -> Any:
    """The chart's Redis from the host: TLS only, verified with the chart's CA (its Secret
    rolloutfleet-redis-ca); the Service's address is not among the certificate's names."""
    service = node.get(NS, "service", "rolloutfleet-redis")
    secret = node.get(NS, "secret", "rolloutfleet-redis")
    password = base64.b64decode(secret["data"]["password"]).decode()
    ca = base64.b64decode(node.get(NS, "secret", "rolloutfleet-redis-ca")["data"]["ca.crt"])
    ca_file = Path(tempfile.gettempdir()) / "rolloutfleet-node-images-redis-ca.crt"
    ca_file.write_bytes(ca)
    url = f"rediss://{service['spec']['clusterIP']}:6379/0"
    return redis.Redis.from_url(url, password=password, ssl_ca_certs=str(ca_file), ssl_check_hostname=False)


class Reader:
    """Reads the jobs' streams as a learner does (a consumer group, each batch acknowledged),
    keeping who produced what it read: without a reader the fleet stops at `maxLen` (64
    batches in the example), which a worker started a few seconds before the other can fill
    alone before the other's first batch."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.seen: dict[str, set[bytes]] = {}

    def producers(self, job: str) -> set[bytes]:
        stream = job_keys(NS, job).batches
        if job not in self.seen:
            self.seen[job] = set()
            try:
                self.client.xgroup_create(stream, "node-test", id="0", mkstream=True)
            except redis.ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise
        for _, entries in self.client.xreadgroup("node-test", "t", {stream: ">"}, count=200) or []:
            self.seen[job] |= {fields[b"producer"] for _, fields in entries}
            if entries:
                self.client.xack(stream, "node-test", *[entry_id for entry_id, _ in entries])
        return self.seen[job]


def test_install_the_chart(node: Node) -> None:
    node.helm("install", RELEASE, "charts/rolloutfleet", "-n", NS, "--create-namespace")
    node.kubectl("-n", NS, "rollout", "status", "deployment/rolloutfleet-operator", "--timeout=240s", timeout=250)
    node.kubectl("-n", NS, "rollout", "status", "statefulset/rolloutfleet-redis", "--timeout=240s", timeout=250)


def test_the_cartpole_example_runs_slim_and_a_torch_job_full(node: Node) -> None:
    node.kubectl("-n", NS, "apply", "-f", "charts/rolloutfleet/examples/cartpole.yaml")
    torch_job = cartpole("cartpole-torch", {"inference": "torch"}, replicas=1)
    torch_job["spec"]["resources"] = {"cpu": "250m", "memory": "1Gi"}
    apply(node, torch_job)
    for job, replicas in (("cartpole", 2), ("cartpole-torch", 1)):
        wait_for(lambda j=job, r=replicas: status(node, j).get("readyReplicas") == r, 300, lambda: node.diagnostics(NS))
    # What the kubelet runs: the image `make images` built, by its ID.
    for job, image in (("cartpole", SLIM), ("cartpole-torch", FULL)):
        running = pods(node, job)
        assert running and all(ready(p) for p in running)
        for pod in running:
            assert pod["spec"]["containers"][0]["image"] == image, pod["metadata"]["name"]
            container = pod["status"]["containerStatuses"][0]
            assert container["imageID"].endswith(podman_id(image)), (container["imageID"], image)
        assert status(node, job)["image"] == image
    # `kubectl get rj -o wide` says it; the plain table keeps its columns.
    lines = node.kubectl("-n", NS, "get", "rj", "-o", "wide").splitlines()
    column = lines[0].split().index("IMAGE")  # AUTOSCALING follows it, <none> for these jobs
    wide = {line.split()[0]: line.split()[column] for line in lines[1:]}
    assert (wide["cartpole"], wide["cartpole-torch"]) == (SLIM, FULL)
    assert "IMAGE" not in node.kubectl("-n", NS, "get", "rj").splitlines()[0]
    # Both publish: every worker's batches are in its job's stream (no learner needed for the first).
    reader = Reader(redis_client(node))
    wanted = {"cartpole": 2, "cartpole-torch": 1}
    wait_for(lambda: all(len(reader.producers(j)) == n for j, n in wanted.items()), 180, lambda: node.diagnostics(NS))
    # Room on the 2-core node for the next test's job.
    node.kubectl("-n", NS, "delete", "rj", "cartpole-torch", "--wait=false")
    wait_for(
        lambda: not gone_or_none(node, "cartpole-torch"), 180, lambda: deletion_diagnostics(node, "cartpole-torch")
    )


def gone_or_none(node: Node, job: str) -> str:
    """The job's name while the API server still has it, else ''."""
    return node.kubectl("-n", NS, "get", "rj", job, "--ignore-not-found", "-o", "name", check=False).strip()


def deletion_diagnostics(node: Node, job: str) -> str:
    """What holds a deletion: the job's metadata (finalizers) and the operator's last lines."""
    meta = node.kubectl("-n", NS, "get", "rj", job, "-o", "jsonpath={.metadata}", check=False)
    log = node.kubectl("-n", NS, "logs", "deploy/rolloutfleet-operator", "--tail=60", check=False)
    return f"{meta}\n--- operator log (tail) ---\n{log}\n{node.diagnostics(NS)}"


@pytest.mark.timeout(600)
def test_a_torch_policy_forced_onto_the_slim_image_fails_once_with_one_line(node: Node) -> None:
    job = cartpole("forced-slim", {"inference": "torch"}, replicas=1, image=SLIM)
    job["spec"]["restartPolicy"] = {"maxRestarts": 5, "backoffSeconds": 1}
    job["spec"]["resources"] = {"cpu": "250m", "memory": "1Gi"}  # torch's, once it runs the full image
    apply(node, job)

    def failed() -> dict[str, Any] | None:
        found = status(node, "forced-slim")
        return found if found.get("phase") == "Failed" else None

    found = wait_for(failed, 180, lambda: node.diagnostics(NS))
    assert found["reason"] == "MissingModule" and found["restarts"] == 0, found
    record = found["workers"]["0"]
    assert record["lastExitCode"] == 3 and record["lacksModule"], record
    # The kubelet's own record: exit 3 and the worker's one line as the termination message.
    kept = pods(node, "forced-slim")
    assert len(kept) == 1, [p["metadata"]["name"] for p in kept]
    terminated = kept[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    message = terminated["message"].strip()
    assert "\n" not in message and message.startswith("missing Python module 'torch': the slim worker image")
    assert "spec.image, or policy.inference: torch, selects the full worker image" in message
    logs = node.kubectl("-n", NS, "logs", kept[0]["metadata"]["name"])
    assert "Traceback" not in logs and logs.count("missing Python module") == 1, logs[-2000:]
    # The fix the line names: without spec.image the operator picks the full image, and it runs.
    node.kubectl(
        "-n", NS, "patch", "rj", "forced-slim", "--type=json", "-p", '[{"op": "remove", "path": "/spec/image"}]'
    )

    def running_full() -> list[dict[str, Any]] | None:
        now = pods(node, "forced-slim")
        ok = len(now) == 1 and ready(now[0]) and now[0]["spec"]["containers"][0]["image"] == FULL
        return now if ok else None

    wait_for(running_full, 300, lambda: node.diagnostics(NS))
    assert status(node, "forced-slim")["restarts"] == 0
    node.kubectl("-n", NS, "delete", "rj", "forced-slim", "--wait=true", "--timeout=60s")


@pytest.fixture(scope="module", autouse=True)
def _cleanup(node: Node) -> Any:
    yield
    node.kubectl("-n", NS, "delete", "rj", "--all", "--timeout=120s", check=False, timeout=130)
    node.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "120s", check=False, timeout=150)

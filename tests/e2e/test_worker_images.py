"""The operator picks each job's worker image, seen through a real API server.

The operator runs with the chart's defaults (no image settings: the full image
``worker:<version>`` and the slim ``worker:<version>-slim``); the test kubelet runs the
workers as local processes whatever the image, so this tier checks the choice, the status
and the printer column; the node tier (tests/node/test_worker_images.py) runs the images.
"""

from __future__ import annotations

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis
from rolloutfleet_operator.config import DEFAULT_WORKER_IMAGE, DEFAULT_WORKER_SLIM_IMAGE
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import Jobs, job_manifest, read_batches


def test_a_cartpole_job_gets_the_slim_image_and_an_inference_torch_job_the_full_one(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    operators.start()
    # Workers of every job here share the host's ports (base + index): one job's pods at a time.
    jobs.create(job_manifest("numpy", redis_server.url, replicas=2))
    jobs.create(job_manifest("torch", redis_server.url, replicas=1, policy={"inference": "torch"}, suspend=True))
    wait_for(lambda: jobs.running("numpy", 2), 120, jobs.describe)
    pods = jobs.pods("numpy")
    assert sorted(pods) == ["numpy-worker-0", "numpy-worker-1"]
    assert {p["spec"]["containers"][0]["image"] for p in pods.values()} == {DEFAULT_WORKER_SLIM_IMAGE}
    read_batches(redis_server.url, "numpy", namespace, {0, 1})
    for name, image in (("numpy", DEFAULT_WORKER_SLIM_IMAGE), ("torch", DEFAULT_WORKER_IMAGE)):
        wait_for(lambda n=name, i=image: jobs.status(n).get("image") == i, 60, jobs.describe)
    assert f"{DEFAULT_WORKER_IMAGE}-slim" == DEFAULT_WORKER_SLIM_IMAGE
    # The API server's printer columns: the image under -o wide only.
    wide = cluster.kubectl("-n", namespace, "get", "rj", "-o", "wide").stdout.splitlines()
    column = wide[0].split().index("IMAGE")  # AUTOSCALING follows it, <none> for these jobs
    assert {row.split()[0]: row.split()[column] for row in wide[1:]} == {
        "numpy": DEFAULT_WORKER_SLIM_IMAGE,
        "torch": DEFAULT_WORKER_IMAGE,
    }
    assert "IMAGE" not in cluster.kubectl("-n", namespace, "get", "rj").stdout.splitlines()[0]
    cluster.kubectl("-n", namespace, "delete", "rj", "numpy", "--timeout=30s")
    wait_for(lambda: not jobs.pods("numpy"), 60, jobs.describe)
    jobs.patch("torch", {"suspend": False})
    wait_for(lambda: jobs.running("torch", 1), 120, jobs.describe)
    assert [p["spec"]["containers"][0]["image"] for p in jobs.pods("torch").values()] == [DEFAULT_WORKER_IMAGE]
    read_batches(redis_server.url, "torch", namespace, {0})
    # spec.image wins, and changing the choice replaces the pods.
    jobs.patch("torch", {"image": "registry.example/team/worker:7"})

    def replaced() -> bool:
        live = [p for p in jobs.pods("torch").values() if not p["metadata"].get("deletionTimestamp")]
        return [p["spec"]["containers"][0]["image"] for p in live] == ["registry.example/team/worker:7"]

    wait_for(replaced, 60, jobs.describe)
    wait_for(lambda: jobs.status("torch").get("image") == "registry.example/team/worker:7", 60, jobs.describe)

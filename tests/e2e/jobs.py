"""RolloutJobs in e2e tests: a manifest builder, a client for one namespace's jobs and
their pods (the ``jobs`` fixture), and a reader that waits for workers' batches."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from rolloutfleet.transport.consumer import BatchConsumer
from tests.e2e.cluster_kit import Cluster, describe_namespace, wait_for

API = ("rolloutfleet.io", "v1alpha1")


def read_secret(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Secret | None:
    """The Secret, or None when the API server has none of that name."""
    try:
        return core.read_namespaced_secret(name, namespace)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise


def job_manifest(name: str, redis_url: str, replicas: int = 2, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": replicas,
        "env": {"id": "CartPole-v1", "numEnvs": 2},
        "sampling": {"rolloutFragmentLength": 50, "seed": 0},
        "redis": {"url": redis_url, "maxLen": 100, "backpressure": "dropOldest"},
        "restartPolicy": {"maxRestarts": 10, "backoffSeconds": 0.5, "backoffLimitSeconds": 2},
    }
    for key, value in spec.items():
        body[key] = {**body[key], **value} if isinstance(body.get(key), dict) and isinstance(value, dict) else value
    return {"apiVersion": "rolloutfleet.io/v1alpha1", "kind": "RolloutJob", "metadata": {"name": name}, "spec": body}


class Jobs:
    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.api = client.CustomObjectsApi(cluster.api())
        self.core = client.CoreV1Api(cluster.api())

    def create(self, manifest: dict[str, Any]) -> None:
        self.api.create_namespaced_custom_object(*API, self.namespace, "rolloutjobs", manifest)

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.api.get_namespaced_custom_object(*API, self.namespace, "rolloutjobs", name))

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.api.patch_namespaced_custom_object(*API, self.namespace, "rolloutjobs", name, {"spec": spec})

    def pods(self, name: str) -> dict[str, dict[str, Any]]:
        items = self.core.list_namespaced_pod(self.namespace, label_selector=f"rolloutfleet.io/job={name}").items
        return {p.metadata.name: self.core.api_client.sanitize_for_serialization(p) for p in items}

    def running(self, name: str, count: int) -> bool:
        pods = self.pods(name)
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        return len(live) == count and all(p["status"].get("phase") == "Running" for p in live)

    def describe(self) -> str:
        return describe_namespace(self.cluster, self.namespace)


def read_batches(
    url: str, job: str, namespace: str, want: set[int], old: frozenset[str] = frozenset(), timeout: float = 120
) -> set[str]:
    """Read until every worker index in ``want`` has published (from a producer not in
    ``old``: a replacement process); returns the new producer ids seen."""
    consumer = BatchConsumer(url, job, namespace=namespace, group="e2e")
    seen: set[int] = set()
    producers: set[str] = set()

    def step() -> bool:
        for message in consumer.read(timeout=1.0):
            if message.metadata.producer not in old:
                seen.add(message.metadata.worker_index)
                producers.add(message.metadata.producer)
            message.ack()
        return want <= seen

    wait_for(step, timeout, lambda: f"worker indexes seen: {seen}", interval=0)
    return producers

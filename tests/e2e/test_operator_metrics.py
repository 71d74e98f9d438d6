"""The operator's /metrics end to end: a real operator process on a real API server reads a
running job's stream in a real Redis and serves its length and its consumer group's lag and
pending count, equal to what Redis answers (XLEN, XINFO GROUPS); a deleted job's series go."""

from __future__ import annotations

import urllib.request

import redis
from prometheus_client.parser import text_string_to_metric_families

from rolloutfleet.fleet.embedded_redis import EmbeddedRedis, free_port
from rolloutfleet.transport.redis.keys import job_keys
from tests.cluster.kubelet import LocalKubelet
from tests.e2e.cluster_kit import Cluster, OperatorFactory, wait_for
from tests.e2e.jobs import API, Jobs, job_manifest

Series = dict[tuple[str, str], float]  # (sample name, group or "") -> value, for one job


def scrape(port: int, namespace: str, job: str) -> Series | None:
    """The job's stream series on the operator's /metrics; None while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (sample.name, sample.labels.get("group", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith(("rolloutfleet_operator_stream", "rolloutfleet_operator_consumer_group"))
        and sample.labels.get("namespace") == namespace
        and sample.labels.get("job_name") == job
    }


def test_the_operator_serves_each_jobs_stream_length_and_group_lag(
    cluster: Cluster,
    kubelet: LocalKubelet,
    operators: OperatorFactory,
    jobs: Jobs,
    namespace: str,
    redis_server: EmbeddedRedis,
) -> None:
    port = free_port()
    operators.start(metrics_port=port)
    client = redis.Redis.from_url(redis_server.url)
    keys = job_keys(namespace, "drain")
    client.xgroup_create(keys.batches, "learner", id="0", mkstream=True)  # a learner's group that reads nothing
    # Under block backpressure the worker stops publishing once maxLen entries wait unread:
    # the stream comes to rest, and the operator's numbers must then equal Redis's.
    jobs.create(job_manifest("drain", redis_server.url, replicas=1, redis={"maxLen": 20, "backpressure": "block"}))
    seen: list[tuple[Series | None, int, dict[str, int]]] = []

    def equal_to_redis() -> bool:
        served = scrape(port, namespace, "drain")
        length = int(client.xlen(keys.batches))
        [group] = client.xinfo_groups(keys.batches)
        told = {"lag": group["lag"], "pending": group["pending"], "entries_read": group["entries-read"]}
        seen[:] = [(served, length, told)]
        return length >= 20 and served == {
            ("rolloutfleet_operator_stream_entries", ""): length,
            ("rolloutfleet_operator_consumer_group_lag", "learner"): told["lag"],
            ("rolloutfleet_operator_consumer_group_pending", "learner"): told["pending"],
            **({} if told["entries_read"] is None else
               {("rolloutfleet_operator_consumer_group_entries_read", "learner"): told["entries_read"]}),
        }  # fmt: skip

    wait_for(equal_to_redis, 120, lambda: f"{seen}\n{jobs.describe()}")
    assert seen[0][2]["lag"] == seen[0][1]  # the group read nothing: every entry waits for it

    jobs.api.delete_namespaced_custom_object(*API, namespace, "rolloutjobs", "drain")
    wait_for(lambda: scrape(port, namespace, "drain") == {}, 60, lambda: str(scrape(port, namespace, "drain")))

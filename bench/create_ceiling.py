"""The API server's ceiling for pod creates, measured in the bench's own run: a bare client
posts the operator's own pod bodies (built by :func:`rolloutfleet_operator.children.pods.build_pod`,
serialized once, before the clock starts) as fast as the server answers, ``concurrency``
at a time over pooled connections, with no rate limit and no parsing of the answers.

What the operator makes of the same server is then a ratio of this ceiling, not a number
that mostly says how busy the shared machine was. The pods belong to a RolloutJob that no
operator watches (its namespace is not the operator's), so the garbage collector keeps
them; the job's PodDisruptionBudget is created first (:func:`pdb_body`) and the simulated
kubelet makes the pods Running, so the server has the work it has with the operator.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Mapping
from typing import Any

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet_operator.children.pods import build_pdb, build_pod, template_hash
from rolloutfleet_operator.config import OperatorConfig


def pod_bodies(job_body: Mapping[str, Any], uid: str, count: int, env: Mapping[str, str]) -> list[bytes]:
    """The JSON of the ``count`` worker pods the operator would create for ``job_body``
    (namespace and name in its metadata) with the operator environment ``env``."""
    job = RolloutJob.from_dict(dict(job_body))
    config = OperatorConfig.from_environ(env)
    hash_ = template_hash(job, config)
    return [json.dumps(build_pod(job, uid, index, config, hash_)).encode() for index in range(count)]


def pdb_body(job_body: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The PodDisruptionBudget the operator keeps for the job: with it, each pod event costs
    kube-controller-manager's disruption controller a scale GET and a PDB status PUT, as it
    does while the operator starts a job."""
    return build_pdb(RolloutJob.from_dict(dict(job_body)), uid)


def post_all(api: Any, namespace: str, bodies: list[bytes], concurrency: int) -> tuple[float, int]:
    """POST every body, ``concurrency`` in flight: (seconds from the first to the last
    answer, pods created). ``api``: a kubernetes ApiClient whose pool holds
    ``concurrency`` connections."""
    method, url, headers, _, _ = api.param_serialize(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    pool = api.rest_client.pool_manager

    def post(body: bytes) -> bool:
        response = pool.request(method, url, body=body, headers=headers, preload_content=True)
        return bool(response.status == 201)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ceiling") as workers:
        created = sum(workers.map(post, bodies))
    return time.monotonic() - started, created

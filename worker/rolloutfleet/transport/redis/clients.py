"""A Redis's connection budget: how many clients it accepts (``maxclients``) and holds now,
and how many connections one worker of a job holds. The operator compares the two for
each job (a fleet past ``maxclients`` has workers refused at connect: the ones over the
limit wait and retry, and sample nothing).

Redis lowers ``maxclients`` by itself to fit its process's file-descriptor limit, so the
number read from ``INFO clients`` is the one in force, not the configured one.
"""

from __future__ import annotations

from dataclasses import dataclass

from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import RETRYABLE, connect, is_cluster


@dataclass(frozen=True)
class ClientLimit:
    """``INFO clients`` of one Redis: ``maxclients`` and ``connected_clients`` (less the reader)."""

    most: int
    connected: int


def worker_connections(job: RolloutJob) -> int:
    """Connections one worker of ``job`` holds to a plain Redis: its batch publisher's for each
    trained policy (the job's keys share it) and its weights subscriber's for each policy.

    >>> from rolloutfleet.spec.job import RolloutJob
    >>> worker_connections(RolloutJob.from_dict({"metadata": {"name": "j"}, "spec": {"env": {"id": "CartPole-v1"}}}))
    2
    """
    multi = job.spec.multi_agent
    if multi is None:
        return 2
    return len(multi.trained_policies) + len(multi.policies)


def read_client_limit(url: str, password: str | None = None) -> ClientLimit | None:
    """The limit of the Redis at ``url``; None when it cannot be reached, or is a Redis Cluster
    (each node has its own limit, and a worker's connections spread over the nodes)."""
    try:
        client = connect(url, password, socket_timeout=2.0, connect_timeout=1.0)
    except RETRYABLE:
        return None
    try:
        if is_cluster(client):
            return None
        info = client.info("clients")
    except RETRYABLE:
        return None
    finally:
        client.close()
    # Less the connection that asked.
    return ClientLimit(most=int(info["maxclients"]), connected=int(info["connected_clients"]) - 1)

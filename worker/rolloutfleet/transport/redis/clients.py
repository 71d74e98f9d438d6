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
from rolloutfleet.spec.redis_url import parse_redis_url
from rolloutfleet.transport.redis.connection import connect, is_cluster
from rolloutfleet.transport.redis.errors import BackendError
from rolloutfleet.transport.redis.reachability import address, failure_line, speaks_tls


@dataclass(frozen=True)
class ClientLimit:
    """``INFO clients`` of one Redis: ``maxclients`` and ``connected_clients`` (less the reader)."""

    most: int
    connected: int


def worker_connections(job: RolloutJob) -> int:
    """Connections one worker of ``job`` holds to a plain Redis (the primary): its batch
    publisher's for each published policy (the trained ones, and a league's opponent with
    ``publishOpponentRows``; the job's keys and the weights downloads share the first),
    one for the weights announcements, unless it reads the weights from a replica
    (``spec.redis.readReplicas``: its two weights connections are the replica's), and with
    ``spec.league`` one for the requests of the next games' snapshots
    (:class:`~rolloutfleet.transport.redis.early.EarlyRequests`, opened at the first load).

    >>> from rolloutfleet.spec.job import RolloutJob
    >>> worker_connections(RolloutJob.from_dict({"metadata": {"name": "j"}, "spec": {"env": {"id": "CartPole-v1"}}}))
    2
    """
    league = 0 if job.spec.league is None else 1
    return len(job.published_policies) + (0 if job.spec.redis.read_replicas else 1) + league


PASSWORD_FROM = "spec.redis.passwordSecret (or the job's own Redis user)"


@dataclass(frozen=True)
class RedisLook:
    """What one look at a job's Redis found: its connection budget (None for a Redis Cluster,
    or when it could not be read), or why it could not be reached, in one line."""

    limit: ClientLimit | None
    error: str | None = None


def look(url: str, password: str | None = None) -> RedisLook:
    """Connect to the Redis at ``url`` as the job's users do and read ``INFO clients``: the limit
    in force, or the reason it cannot be reached (:func:`failure_line`: connection refused,
    TLS expected, a password refused, ...). A Redis Cluster gives neither limit nor error
    (each node has its own limit, and a worker's connections spread over the nodes)."""
    where = address(url)
    try:
        client = connect(url, password, socket_timeout=2.0, connect_timeout=1.0)
    except (BackendError, ValueError) as exc:  # ValueError: not a Redis URL
        return RedisLook(None, _tls_spoken(url, where) or failure_line(exc, where, PASSWORD_FROM))
    try:
        if is_cluster(client):
            return RedisLook(None)
        info = client.info("clients")
    except BackendError as exc:
        return RedisLook(None, failure_line(exc, where, PASSWORD_FROM))
    finally:
        client.close()
    # Less the connection that asked.
    return RedisLook(ClientLimit(most=int(info["maxclients"]), connected=int(info["connected_clients"]) - 1))


def read_client_limit(url: str, password: str | None = None) -> ClientLimit | None:
    """The limit of the Redis at ``url``; None when it cannot be reached, or is a Redis Cluster."""
    return look(url, password).limit


def _tls_spoken(url: str, where: str) -> str | None:
    """For a ``redis://`` URL whose server answers in TLS (a TLS-only Redis resets a plain
    connection): the line that says so and what to write instead."""
    try:
        parsed = parse_redis_url(url)
    except ValueError:
        return None
    if parsed.scheme != "redis" or not speaks_tls(parsed.host.strip("[]"), parsed.port):
        return None
    return (
        f"redis at {where}: the server speaks TLS: use rediss:// in spec.redis.url and spec.redis.tls.caSecret "
        "(the CA that signed its certificate)"
    )

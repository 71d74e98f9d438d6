"""Opening Redis clients the same way everywhere: :func:`connect` (a single node or a
cluster), and :class:`JobClient`, what every client of a job's keys shares. The options
are :mod:`~rolloutfleet.transport.redis.client_options`'s, the errors and the retry loop
:mod:`~rolloutfleet.transport.redis.retry`'s, the start-up checks
:mod:`~rolloutfleet.transport.redis.reachability`'s; their names are importable from here too.

    >>> client = connect("redis://127.0.0.1:6379/0")   # doctest: +SKIP
    >>> client.ping()                                    # doctest: +SKIP
    True

**Redis Cluster.** :func:`connect` asks the node it is given (``INFO cluster``); a node
in cluster mode gets a :class:`redis.cluster.RedisCluster` client (it finds the other
nodes, follows MOVED/ASK redirects, re-reads the slot map after a connection error: a
failover). A cluster whose ``cluster_state`` is ``fail`` is a retryable
:class:`~redis.exceptions.ClusterDownError` saying so.
"""

from __future__ import annotations

import threading
from typing import Any, Self, cast

import redis
from redis.cluster import RedisCluster

from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url, redacted_url
from rolloutfleet.transport.redis.client_options import PASSWORD_ENV, USERNAME_ENV, client_options
from rolloutfleet.transport.redis.gather import GATHERING, SPLICING
from rolloutfleet.transport.redis.reachability import (
    DEFAULT_STARTUP_TIMEOUT_S,
    address,
    check_reachable,
    check_url,
    failure_line,
    wait_for_redis,
)
from rolloutfleet.transport.redis.retry import (
    DEFAULT_RECONNECT_TIMEOUT_S,
    RETRYABLE,
    RedisAuthRefused,
    RedisUnavailable,
    RetryLoop,
    explain,
    refresh_routes,
    untrusted_certificate,
)

__all__ = [
    "DEFAULT_RECONNECT_TIMEOUT_S",
    "DEFAULT_STARTUP_TIMEOUT_S",
    "PASSWORD_ENV",
    "RETRYABLE",
    "USERNAME_ENV",
    "JobClient",
    "RedisAuthRefused",
    "RedisUnavailable",
    "RetryLoop",
    "address",
    "check_reachable",
    "check_url",
    "connect",
    "explain",
    "failure_line",
    "is_cluster",
    "node_client",
    "refresh_routes",
    "untrusted_certificate",
    "wait_for_redis",
    "where",
    "where_url",
]


def where(client: redis.Redis) -> str:
    """``host:port/db`` (or the unix socket's path) of ``client``, never its password;
    ``cluster via host:port`` for a Redis Cluster client."""
    if isinstance(client, RedisCluster):
        node = cast(Any, client).get_default_node()
        return f"cluster via {node.host}:{node.port}" if node is not None else "cluster"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def where_url(url: str) -> str:
    """``host:port/db`` of a URL (or the unix socket's path), never its password."""
    try:
        return parse_redis_url(url).where
    except BadRedisURL:
        return redacted_url(url)


def is_cluster(client: redis.Redis) -> bool:
    """Whether ``client`` talks to a Redis Cluster (see :func:`connect`)."""
    return isinstance(client, RedisCluster)


def node_client(client: redis.Redis, key: str) -> redis.Redis:
    """The client of the node serving ``key``: ``client`` itself unless it is a cluster's
    (for pipelines of one slot with keyless commands such as TIME or WAIT)."""
    if not isinstance(client, RedisCluster):
        return client
    cluster = cast(Any, client)
    return cast(redis.Redis, cluster.get_redis_connection(cluster.get_node_from_key(key)))


def connect(
    url: str,
    password: str | None = None,
    *,
    socket_timeout: float = 30.0,
    connect_timeout: float = 5.0,
    large_values: bool = False,
) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``): a
    :class:`~redis.cluster.RedisCluster` when the node is in cluster mode. Asks the node
    (one round trip), so it raises what Redis being away raises: call it in a retry loop.

    The password is ``password`` or else ``$ROLLOUTFLEET_REDIS_PASSWORD``; it is never
    logged (redis-py masks it in the client's repr). ``socket_timeout`` must exceed the
    longest BLOCK plus the largest transfer: without one a dead server hangs the caller.
    ``large_values``: the client sends an argument over 6 000 bytes (a batch's payload)
    from its own buffer (:data:`~rolloutfleet.transport.redis.gather.SPLICING`), and a command's parts in one
    ``sendmsg`` (:mod:`~rolloutfleet.transport.redis.gather`); not on a Redis Cluster, whose
    client takes no packer and copies as before.
    """
    parsed = parse_redis_url(url)  # BadRedisURL (a ValueError): one line, no password
    options = client_options(password, socket_timeout, connect_timeout, parsed)
    packer: dict[str, Any] = {}
    if large_values:
        packer["command_packer"] = SPLICING
        if parsed.scheme in GATHERING:  # not over TLS: an SSL socket has no sendmsg
            packer["connection_class"] = GATHERING[parsed.scheme]
    client = redis.Redis.from_url(parsed.client_url, health_check_interval=30, **options, **packer)
    if parsed.scheme == "unix":
        return client
    cluster = _cluster_state(client)
    if cluster is None:
        return client
    client.close()
    if cluster != "ok":
        raise redis.exceptions.ClusterDownError(
            f"CLUSTERDOWN the Redis Cluster at {where_url(url)} reports cluster_state:{cluster}"
        )
    # Partial coverage is accepted at start: a slot without a master is a retryable error
    # of the commands that need it (a failover in progress), not a client that cannot be made.
    made = RedisCluster.from_url(parsed.client_url, require_full_coverage=False, **options)
    return cast(redis.Redis, made)  # the same command API; is_cluster() tells them apart


def connect_lazily(url: str, password: str | None = None, *, socket_timeout: float = 30.0) -> redis.Redis:
    """:func:`connect` for a plain Redis (a read replica) without asking it anything: the
    client connects at its first command, so a replica away now is an error of that command
    (the caller reads elsewhere meanwhile), not of making the client."""
    parsed = parse_redis_url(url)
    options = client_options(password, socket_timeout, 5.0, parsed)
    return redis.Redis.from_url(parsed.client_url, health_check_interval=30, **options)


def _cluster_state(client: redis.Redis) -> str | None:
    """``None`` for a Redis not in cluster mode, else its ``cluster_state`` (``ok``, ``fail``)."""
    try:
        info = client.info("cluster")
    except redis.AuthenticationError:
        raise
    except redis.ResponseError:  # INFO refused (an ACL): a server that hides it is taken as it is
        return None
    if not int(info.get("cluster_enabled", 0)):
        return None
    raw = client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
    if isinstance(raw, dict):  # parsed by redis-py
        return str(raw.get("cluster_state", "unknown"))
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    return fields.get("cluster_state", "unknown")


class JobClient:
    """What every client of a job's keys shares: the connection (a cluster client on a Redis
    Cluster), opened through a :class:`RetryLoop` that later calls use too, closed once, and
    the context-manager protocol.

    ``stop``: see :class:`RetryLoop` (a publisher's interrupt ends its waits). ``client``: an
    open client of the same Redis to share instead of connecting (not closed here).
    """

    def __init__(
        self,
        redis_url: str,
        password: str | None,
        *,
        reconnect_timeout_s: float,
        socket_timeout_s: float = 30.0,
        stop: threading.Event | None = None,
        large_values: bool = False,
        client: redis.Redis | None = None,
    ) -> None:
        self._retry = RetryLoop(reconnect_timeout_s, stop=stop, where=where_url(redis_url))
        self._owned = client is None
        self.client: redis.Redis = client or self._retry.call(
            lambda: connect(redis_url, password, socket_timeout=socket_timeout_s, large_values=large_values)
        )
        self._retry.client = self.client

    def close(self) -> None:
        """Close the connection (unless it is a shared one)."""
        if self._owned:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

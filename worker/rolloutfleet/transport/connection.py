"""Opening Redis clients the same way everywhere: password from the environment, timeouts
that never hang, which errors mean "Redis is away, try again", and one clear line when it
stays away past the caller's deadline.

    >>> client = connect("redis://127.0.0.1:6379/0")   # doctest: +SKIP
    >>> client.ping()                                    # doctest: +SKIP
    True

**Deadlines.** A :class:`RetryLoop` keeps calling while Redis refuses connections
(restarting), does not answer (paused: SIGSTOP, a frozen VM, a long fork), is still
loading its data set, or refuses writes (out of memory, a read-only replica), until
``timeout_s`` after the call began; then it raises :class:`RedisUnavailable`, one line
naming the server, how long it was tried and the last error. A call in flight when
Redis stops answering fails after the client's socket timeout, so that must be shorter
than the deadline (else the first timeout uses up the whole window and nothing is
retried): the clients here keep it well below theirs, and a deadline is kept to within
one socket timeout.

**Redis Cluster.** :func:`connect` asks the node it is given (``INFO cluster``); a node
in cluster mode gets a :class:`redis.cluster.RedisCluster` client (it finds the other
nodes itself, follows MOVED/ASK redirects, and re-reads the slot map after a connection
error: a failover). A cluster whose ``cluster_state`` is ``fail`` (a slot without a
master) is a retryable :class:`~redis.exceptions.ClusterDownError` saying so; a wrong
password is one line at once (never retried by a :class:`RetryLoop`: waiting does not fix
it), while a worker's own loop keeps trying (the Secret may be fixed).
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any, Self, TypeVar, cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from rolloutfleet.spec.network import CA_FILE_ENV
from rolloutfleet.spec.redis_url import BadRedisURL, RedisURL, parse_redis_url, redacted_url

PASSWORD_ENV = "ROLLOUTFLEET_REDIS_PASSWORD"
USERNAME_ENV = "ROLLOUTFLEET_REDIS_USERNAME"
"""The Redis ACL user (the operator's per-job users, :mod:`rolloutfleet.spec.redis_acl`) when the URL names none."""

RETRYABLE: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.exceptions.BusyLoadingError,  # a restarted server still loading its data set
    redis.exceptions.TryAgainError,
    redis.exceptions.ReadOnlyError,  # a replica during failover
    redis.exceptions.OutOfMemoryError,  # maxmemory reached (noeviction): room comes back as learners consume
    redis.exceptions.ClusterError,  # a cluster failing over: CLUSTERDOWN, redirections exhausted
    redis.exceptions.SlotNotCoveredError,  # a slot whose master is gone, before its replica took over
    redis.exceptions.MovedError,  # a node client of a slot that moved (failover): re-routed, then retried
    ConnectionResetError,
)
"""Errors after which the same call may succeed later (Redis restarting, failing over, full)."""


class RedisUnavailable(redis.ConnectionError):
    """Redis stayed away (or kept refusing writes) past a caller's deadline; the message is
    one line saying where, for how long, and the last error. A ``ConnectionError``, so a
    caller with a retry loop of its own (a worker) still treats it as Redis being away."""


class RedisAuthRefused(RedisUnavailable, redis.AuthenticationError):
    """Redis refused the password: never retried (it will not become right by waiting). One
    line, as :class:`RedisUnavailable`; also an ``AuthenticationError``, so a caller that
    tells a refused password from an outage (a worker exits, rather than waiting) still can."""


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


def refresh_routes(client: redis.Redis | None) -> None:
    """A cluster client reads the slot map again (after an error: a master may have failed
    over); nothing for a plain client, nor while no node answers."""
    if isinstance(client, RedisCluster):
        try:
            cast(Any, client).nodes_manager.initialize()
        except (*RETRYABLE, redis.exceptions.RedisClusterException):
            pass


def explain(exc: BaseException) -> str:
    """What a retryable error means, in words a user can act on (one line)."""
    if isinstance(exc, redis.AuthenticationError):
        return f"authentication refused ({' '.join(str(exc).split())}): check the password (spec.redis.passwordSecret)"
    if isinstance(exc, redis.exceptions.ClusterDownError | redis.exceptions.SlotNotCoveredError):
        return f"the Redis Cluster is down ({' '.join(str(exc).split())}): a hash slot has no master"
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return (
            "it refuses writes: out of memory (maxmemory reached with policy noeviction); "
            "learners consuming free room, or raise maxmemory"
        )
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return "it refuses writes: it is a read-only replica (failing over?)"
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        return "it is still loading its data set"
    if untrusted_certificate(exc):
        return f"TLS: its certificate is not trusted (the CA: ${CA_FILE_ENV}, spec.redis.tls.caSecret): {' '.join(str(exc).split())}"
    return " ".join(str(exc).split()) or type(exc).__name__


T = TypeVar("T")

DEFAULT_RECONNECT_TIMEOUT_S = 120.0
"""How long a learner-side call (consume, publish weights, look) rides out a Redis that is
away before it fails with :class:`RedisUnavailable`: a Redis pod rescheduled, restarted or
paused takes well under that. Workers retry for ever in their own loop instead."""


def connect(
    url: str,
    password: str | None = None,
    *,
    socket_timeout: float = 30.0,
    connect_timeout: float = 5.0,
) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` for TLS, ``unix://``): a
    :class:`~redis.cluster.RedisCluster` when the node is in cluster mode. Asks the node
    (one round trip), so it raises what Redis being away raises: call it in a retry loop.

    The password is ``password`` or else ``$ROLLOUTFLEET_REDIS_PASSWORD``; it is never
    logged (redis-py masks it in the client's repr). ``socket_timeout`` must exceed the
    longest BLOCK plus the largest transfer: without one a dead server hangs the caller.
    """
    parsed = parse_redis_url(url)  # BadRedisURL (a ValueError): one line, no password
    options = _options(password, socket_timeout, connect_timeout, parsed)
    client = redis.Redis.from_url(parsed.client_url, health_check_interval=30, **options)
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


def _options(password: str | None, socket_timeout: float, connect_timeout: float, url: RedisURL) -> dict[str, Any]:
    """Client options of :func:`connect`; the password is the URL's, else ``password``, else
    ``$ROLLOUTFLEET_REDIS_PASSWORD``. Credentials go as arguments, never inside the URL the
    client parses (:mod:`rolloutfleet.spec.redis_url`)."""
    return {
        "username": url.username or os.environ.get(USERNAME_ENV) or None,
        "password": url.password or (password if password is not None else os.environ.get(PASSWORD_ENV) or None),
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        "socket_keepalive": True,
        # Retries are ours (RetryLoop), so a re-sent XADD is a decision we make and count.
        "retry": Retry(NoBackoff(), 0),
        **_tls_options(url),
    }


def _tls_options(url: RedisURL) -> dict[str, Any]:
    """For ``rediss://``: the server's certificate is verified (chain and host name, redis-py's
    defaults) against ``$ROLLOUTFLEET_REDIS_CA_FILE`` when set."""
    ca_file = os.environ.get(CA_FILE_ENV)
    return {"ssl_ca_certs": ca_file} if url.scheme == "rediss" and ca_file else {}


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


class RetryLoop:
    """Exponential backoff with jitter for calls that fail while Redis restarts.

    >>> loop = RetryLoop(timeout_s=30)
    >>> loop.call(lambda: 42)
    42

    ``stop``: once set, a failed attempt is re-raised at once instead of retried, and a
    backoff sleep in progress ends: a process told to stop must not spend its grace period
    waiting for a Redis that is gone.

    ``where``: the server, for the message of :class:`RedisUnavailable` (see :func:`where`).
    """

    def __init__(
        self,
        timeout_s: float,
        first_delay_s: float = 0.05,
        max_delay_s: float = 2.0,
        stop: threading.Event | None = None,
        where: str = "",
    ) -> None:
        if timeout_s < 0:
            raise ValueError(f"reconnect timeout must be >= 0 s, got {timeout_s}")
        self.timeout_s = timeout_s
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.stop = stop
        self.where = where
        self.retries = 0
        """Failed attempts that were retried, over the loop's lifetime (a metric)."""
        self.client: redis.Redis | None = None
        """A Redis Cluster client whose slot map is read again before each retry."""

    def call(self, operation: Callable[[], T], on_retry: Callable[[Exception], None] | None = None) -> T:
        """``operation()``, retried on :data:`RETRYABLE` errors until ``timeout_s`` after the
        call began; then :class:`RedisUnavailable` (the last error as its cause)."""
        started = time.monotonic()
        deadline = started + self.timeout_s
        delay = self.first_delay_s
        attempts = 0
        while True:
            attempts += 1
            try:
                return operation()
            except RedisUnavailable:
                raise  # an inner loop's deadline passed: it has said everything
            except redis.AuthenticationError as exc:
                raise RedisAuthRefused(
                    f"Redis {'at ' + self.where + ' ' if self.where else ''}refused the connection: {explain(exc)}"
                ) from exc
            except RETRYABLE as exc:
                if untrusted_certificate(exc):  # as a refused password: waiting does not fix it
                    raise RedisUnavailable(
                        f"Redis {'at ' + self.where + ' ' if self.where else ''}refused: {explain(exc)}"
                    ) from exc
                remaining = deadline - time.monotonic()
                if self._stopped():
                    raise
                if remaining <= 0:
                    raise RedisUnavailable(
                        f"Redis {'at ' + self.where + ' ' if self.where else ''}unavailable for "
                        f"{time.monotonic() - started:.0f} s, past the reconnect deadline of {self.timeout_s:g} s "
                        f"({attempts} attempt{'s' if attempts > 1 else ''}): {explain(exc)}"
                    ) from exc
                self.retries += 1
                refresh_routes(self.client)
                if on_retry is not None:
                    on_retry(exc)
                # Full jitter: many workers reconnecting to a restarted Redis do not stampede.
                pause = min(remaining, random.uniform(delay / 2, delay))
                if self.stop is None:
                    time.sleep(pause)
                elif self.stop.wait(pause):
                    raise
                delay = min(delay * 2, self.max_delay_s)

    def _stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()


DEFAULT_STARTUP_TIMEOUT_S = 30.0
"""How long the commands a person runs (``run --redis``, ``streams``, ``consume``) wait for a
Redis that is not there at start-up before they fail with one line. A worker waits without
bound unless told otherwise (a pod whose Redis is not up yet stays unready and keeps trying)."""


def address(url: str) -> str:
    """``host:port`` (or ``unix:path``) of a Redis URL, never its user or password.

    >>> address("redis://:secret@10.0.0.7:6380/2"), address("redis://redis"), address("unix:///run/r.sock")
    ('10.0.0.7:6380', 'redis:6379', 'unix:/run/r.sock')
    """
    try:
        return parse_redis_url(url).address
    except BadRedisURL:
        return redacted_url(url).partition("://")[2] or "?"


def check_url(url: str) -> None:
    """``ValueError`` (one line, no password) unless ``url`` is a redis://, rediss:// or unix://PATH URL
    (:func:`rolloutfleet.spec.redis_url.parse_redis_url`'s rule).

    >>> check_url("http://user:pw@example.com:6379/0")
    Traceback (most recent call last):
    ...
    rolloutfleet.spec.redis_url.BadRedisURL: 'http://example.com:6379/0' is not a Redis URL: it must start with redis://, rediss:// or unix://
    """
    parse_redis_url(url)


def failure_line(exc: BaseException, where: str) -> str:
    """What went wrong reaching the Redis at ``where``, in one line a user can act on.

    >>> failure_line(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), "127.0.0.1:1")
    'redis at 127.0.0.1:1: connection refused'
    """
    if isinstance(exc, RedisAuthRefused) and isinstance(exc.__cause__, redis.AuthenticationError):
        exc = exc.__cause__  # Redis's own words, not a retry loop's sentence around them
    text = " ".join(str(exc).split())
    lower = text.lower()
    if isinstance(exc, redis.AuthenticationError):
        why = (
            "a password is required"
            if "noauth" in lower or "required" in lower or "already authenticated" in lower  # RESP3's HELLO says so
            else f"authentication failed ({text})"
        )
        return f"redis at {where}: {why}; the password comes from ${PASSWORD_ENV}"
    if isinstance(exc, redis.TimeoutError):
        return f"redis at {where}: no answer (timed out)"
    known = {
        "connection refused": "connection refused",
        "name or service not known": "host not found",
        "nodename nor servname": "host not found",
        "temporary failure in name resolution": "host not found (name resolution failed)",
        "no route to host": "no route to host",
        "network is unreachable": "network is unreachable",
        "connection reset": "the connection was reset (not a Redis server, or TLS expected: rediss://?)",
        "certificate verify failed": f"TLS: its certificate is not trusted (the CA: ${CA_FILE_ENV}, spec.redis.tls.caSecret)",
    }
    reason = next((why for needle, why in known.items() if needle in lower), None)
    return f"redis at {where}: {reason or explain(exc)}"


def wait_for_redis(
    client: redis.Redis, timeout_s: float | None, where: str, stopped: Callable[[], bool] | None = None
) -> None:
    """PING until Redis answers: retried while it is away for ``timeout_s`` (None: without
    bound), then :class:`RedisUnavailable` with :func:`failure_line`'s line; an
    authentication error at once (the password will not become right by waiting)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.1
    while True:
        try:
            client.ping()
            return
        except redis.AuthenticationError as exc:
            raise RedisUnavailable(failure_line(exc, where)) from exc
        except RETRYABLE as exc:
            if untrusted_certificate(exc):  # waiting does not make a certificate trusted
                raise RedisUnavailable(failure_line(exc, where)) from exc
            remaining = math.inf if deadline is None else deadline - time.monotonic()
            if remaining <= 0 or (stopped is not None and stopped()):
                raise RedisUnavailable(f"{failure_line(exc, where)} (tried for {timeout_s or 0:g} s)") from exc
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 2.0)


def untrusted_certificate(exc: BaseException) -> bool:
    """Whether ``exc`` is a TLS server whose certificate the CA given does not verify."""
    return "certificate verify failed" in str(exc).lower()


def check_reachable(url: str, password: str | None = None, timeout_s: float | None = DEFAULT_STARTUP_TIMEOUT_S) -> None:
    """Start-up check of a command: ``ValueError`` for a URL that is not a Redis URL,
    :class:`RedisUnavailable` (one line, :func:`wait_for_redis`) for a Redis that stays
    away past ``timeout_s`` or refuses the password."""
    parsed = parse_redis_url(url)
    # A plain client: it only PINGs, which any node of a cluster answers too (connect() would
    # ask the node about cluster mode first, and raise before this wait could retry).
    client = redis.Redis.from_url(parsed.client_url, **_options(password, 5.0, min(5.0, timeout_s or 5.0), parsed))
    try:
        wait_for_redis(client, timeout_s, parsed.address)
    finally:
        client.close()


class JobClient:
    """What every client of a job's keys shares: the connection (a cluster client on a Redis
    Cluster), opened through a :class:`RetryLoop` that later calls use too, closed once, and
    the context-manager protocol.

    ``stop``: see :class:`RetryLoop` (a publisher's interrupt ends its waits).
    """

    def __init__(
        self,
        redis_url: str,
        password: str | None,
        *,
        reconnect_timeout_s: float,
        socket_timeout_s: float = 30.0,
        stop: threading.Event | None = None,
    ) -> None:
        self._retry = RetryLoop(reconnect_timeout_s, stop=stop, where=where_url(redis_url))
        self.client: redis.Redis = self._retry.call(
            lambda: connect(redis_url, password, socket_timeout=socket_timeout_s)
        )
        self._retry.client = self.client

    def close(self) -> None:
        """Close the connection."""
        self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Start-up checks of the commands a person runs (``run --redis``, ``streams``, ``consume``):
is the URL a Redis URL, does a Redis answer there within a deadline, and if not, one line
saying why (:func:`failure_line`), never a traceback.
"""

from __future__ import annotations

import math
import socket
import ssl
import time
from collections.abc import Callable

import redis

from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url, redacted_url
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet.transport.redis.client_options import PASSWORD_ENV, client_options
from rolloutfleet.transport.redis.retry import (
    RETRYABLE,
    Backoff,
    RedisAuthRefused,
    RedisUnavailable,
    explain,
    untrusted_certificate,
)

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


def failure_line(exc: BaseException, where: str, password_from: str = f"${PASSWORD_ENV}") -> str:
    """What went wrong reaching the Redis at ``where``, in one line a user can act on
    (``password_from``: where the password comes from, for a refused one).

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
        return f"redis at {where}: {why}; the password comes from {password_from}"
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


def speaks_tls(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Whether the server at ``host:port`` completes a TLS handshake. Its certificate is not
    checked and nothing is sent: this only asks what it speaks, to tell a ``redis://`` URL
    that meets a TLS-only Redis (the connection is reset) from a server that is no Redis."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def wait_for_redis(
    client: redis.Redis, timeout_s: float | None, where: str, stopped: Callable[[], bool] | None = None
) -> None:
    """PING until Redis answers: retried while it is away for ``timeout_s`` (None: without
    bound), then :class:`RedisUnavailable` with :func:`failure_line`'s line; an
    authentication error at once (the password will not become right by waiting)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    backoff = Backoff(0.1, 2.0)
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
            time.sleep(min(backoff.next(), remaining))


def check_reachable(url: str, password: str | None = None, timeout_s: float | None = DEFAULT_STARTUP_TIMEOUT_S) -> None:
    """Start-up check of a command: ``ValueError`` for a URL that is not a Redis URL,
    :class:`RedisUnavailable` (one line, :func:`wait_for_redis`) for a Redis that stays
    away past ``timeout_s`` or refuses the password."""
    parsed = parse_redis_url(url)
    # A plain client: it only PINGs, which any node of a cluster answers too (connect() would
    # ask the node about cluster mode first, and raise before this wait could retry).
    client = redis.Redis.from_url(
        parsed.client_url, **client_options(password, 5.0, min(5.0, timeout_s or 5.0), parsed)
    )
    try:
        wait_for_redis(client, timeout_s, parsed.address)
    finally:
        client.close()

"""The options every Redis client here is made with: the credentials (the URL's, else the
caller's, else the environment's; never inside the URL the client parses), timeouts that
never hang, no redis-py retries (ours decide, and count, a re-sent XADD), and for
``rediss://`` the CA to verify the server against."""

from __future__ import annotations

import os
from typing import Any

from redis.backoff import NoBackoff
from redis.retry import Retry

from rolloutfleet.spec.redis_url import RedisURL
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV

PASSWORD_ENV = "ROLLOUTFLEET_REDIS_PASSWORD"
USERNAME_ENV = "ROLLOUTFLEET_REDIS_USERNAME"
"""The Redis ACL user (the operator's per-job users, :mod:`rolloutfleet.transport.redis.acl`) when the URL names none."""


def client_options(
    password: str | None, socket_timeout: float, connect_timeout: float, url: RedisURL
) -> dict[str, Any]:
    """Client options of :func:`~rolloutfleet.transport.redis.connection.connect`; the password is the URL's, else ``password``, else
    ``$ROLLOUTFLEET_REDIS_PASSWORD``. Credentials go as arguments, never inside the URL the
    client parses (:mod:`rolloutfleet.spec.redis_url`)."""
    return {
        "username": url.username or os.environ.get(USERNAME_ENV) or None,
        "password": url.password or (password if password is not None else os.environ.get(PASSWORD_ENV) or None),
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": connect_timeout,
        # Retries are ours (RetryLoop), so a re-sent XADD is a decision we make and count.
        "retry": Retry(NoBackoff(), 0),
        # TCP keepalive (a Unix socket has none: redis-py's connection for it refuses the option).
        **({} if url.scheme == "unix" else {"socket_keepalive": True}),
        **_tls_options(url),
    }


def _tls_options(url: RedisURL) -> dict[str, Any]:
    """For ``rediss://``: the server's certificate is verified (chain and host name, redis-py's
    defaults) against ``$ROLLOUTFLEET_REDIS_CA_FILE`` when set."""
    ca_file = os.environ.get(CA_FILE_ENV)
    return {"ssl_ca_certs": ca_file} if url.scheme == "rediss" and ca_file else {}

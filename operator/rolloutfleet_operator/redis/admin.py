"""The operator's admin calls to a job's Redis: ``ACL SETUSER`` on every node (a Redis
Cluster's replicas included: ACLs are per node and not replicated), ``ACL GETUSER`` for the
password hashes a user has now. Synchronous (redis-py); the caller runs them in a thread.
Errors are one line without any password (:class:`AdminError`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import redis

from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url
from rolloutfleet.spec.sections.network_spec import CA_FILE_ENV
from rolloutfleet.transport.redis.acl import AclUser

TIMEOUT_S = 5.0


class AdminError(RuntimeError):
    """An admin call failed; the message is one line naming the node, never a password."""


@dataclass(frozen=True)
class Admin:
    """An admin login to a Redis: its URL (no password in it), user and password."""

    url: str
    username: str | None
    password: str | None = field(repr=False)
    source: str = "operator"
    """Where the credential came from, for messages: ``operator`` or ``Secret <name>``."""
    replicas: tuple[str, ...] = ()
    """Read replicas of the URL's Redis (``spec.redis.readReplicas``): ACLs are not replicated,
    so the users are set on each too, with the same admin login."""


def _client(admin: Admin, host: str | None = None, port: int | None = None) -> redis.Redis:
    parsed = parse_redis_url(admin.url)
    url = parsed.client_url
    if host is not None:
        options = f"?{parsed.query}" if parsed.query else ""
        url = f"{parsed.scheme}://{host}:{port}/{parsed.db}{options}"
    # rediss://: verified against the CA the chart mounts in this pod (as the workers' clients do).
    ca_file = os.environ.get(CA_FILE_ENV) if parsed.scheme == "rediss" else None
    return redis.Redis.from_url(
        url,
        **({"ssl_ca_certs": ca_file} if ca_file else {}),
        username=admin.username or parsed.username,
        password=admin.password,
        socket_timeout=TIMEOUT_S,
        socket_connect_timeout=TIMEOUT_S,
    )


def cluster_nodes(text: str) -> list[tuple[str, int]]:
    """``(host, port)`` of every node of a ``CLUSTER NODES`` reply, masters and replicas,
    less those flagged ``fail``, ``noaddr`` or ``handshake`` (pure)::

        >>> cluster_nodes("a1 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-8191\\n"
        ...               "b2 10.0.0.2:7001@17001 slave a1 0 0 1 connected\\n"
        ...               "c3 :0@0 master,fail,noaddr - 0 0 2 disconnected\\n")
        [('10.0.0.1', 7000), ('10.0.0.2', 7001)]
    """
    nodes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or {"fail", "noaddr", "handshake"} & set(parts[2].split(",")):
            continue
        address = parts[1].split("@")[0].split(",")[0]
        host, _, port = address.rpartition(":")
        if host and port.isdigit():
            nodes.append((host.strip("[]"), int(port)))
    return nodes


def _nodes(admin: Admin) -> list[redis.Redis]:
    """A client per node: the one of the URL and its read replicas, or every node of its
    Redis Cluster."""
    seed = _client(admin)
    try:
        enabled = seed.info("cluster").get("cluster_enabled")
    except redis.ResponseError:
        enabled = 0
    if not enabled:
        return [seed, *(_client(Admin(url, admin.username, admin.password)) for url in admin.replicas)]
    reply: Any = seed.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    seed.close()
    return [_client(admin, host, port) for host, port in cluster_nodes(text)]


def apply_users(admin: Admin, users: list[tuple[AclUser, list[str]]]) -> int:
    """``ACL SETUSER`` of each user with its password hashes, on every node; how many nodes."""
    try:
        nodes = _nodes(admin)
        for node in nodes:
            try:
                pipe = node.pipeline(transaction=False)
                for user, hashes in users:
                    pipe.execute_command("ACL", "SETUSER", *user.setuser_args(hashes))  # type: ignore[no-untyped-call]
                pipe.execute()
            except (redis.RedisError, OSError) as error:
                kwargs = node.connection_pool.connection_kwargs
                raise AdminError(_line(admin, error, f"{kwargs.get('host')}:{kwargs.get('port')}")) from None
            finally:
                node.close()
        return len(nodes)
    except (redis.RedisError, BadRedisURL, OSError) as error:
        raise AdminError(_line(admin, error)) from None


def current_hashes(admin: Admin, user: str) -> list[str]:
    """The password hashes ``user`` has on the URL's node (none: no such user)."""
    client = _client(admin)
    try:
        found: Any = client.acl_getuser(user)
    except (redis.RedisError, BadRedisURL, OSError) as error:
        raise AdminError(_line(admin, error)) from None
    finally:
        client.close()
    return [h.decode() if isinstance(h, bytes) else str(h) for h in (found or {}).get("passwords", [])]


def _line(admin: Admin, error: BaseException, node: str | None = None) -> str:
    where = node or (parse_redis_url(admin.url).address if not isinstance(error, BadRedisURL) else "?")
    text = " ".join(str(error).split())
    if admin.password:
        text = text.replace(admin.password, "***")
    return f"redis at {where} (admin credential of the {admin.source}): {text or type(error).__name__}"

"""The Redis client library's types under the names the rest of the worker package uses, so
that nothing above :mod:`rolloutfleet.transport.redis` imports ``redis`` itself (an import
contract holds it): the sides (publisher, consumer, weights, heartbeats) and the processes
(worker, evaluator, recorder, the CLI) catch these. Which of them mean "Redis is away, try
again" is :mod:`.retry`'s ``RETRYABLE``.
"""

from __future__ import annotations

from typing import TypeAlias

import redis
import redis.exceptions

Client: TypeAlias = redis.Redis
"""A client of one Redis node, or (a subclass in behaviour) of a Redis Cluster: what
:func:`~rolloutfleet.transport.redis.connection.connect` returns."""

BackendError = redis.RedisError
"""Anything the Redis client raised: away, refusing, or answering with an error."""

CredentialsRefused = redis.AuthenticationError
"""A wrong username or password (also a connection error: catch it first)."""

PermissionRefused = redis.exceptions.NoPermissionError
"""NOPERM: the ACL user lacks a command or a key (revoked or narrowed mid-run)."""

CommandRefused = redis.ResponseError
"""Redis answered a command with an error (no such group, wrong type, a script's error)."""

ConcurrentChange = redis.WatchError
"""A watched key changed before EXEC: the transaction did nothing, and may be tried again."""

OutOfMemory = redis.exceptions.OutOfMemoryError
"""``maxmemory`` reached under ``noeviction``: writes refused until room is freed."""

TransactionAborted = redis.exceptions.ExecAbortError
"""EXECABORT: a command queued in a MULTI was refused, so none of them ran."""

ClusterError = redis.exceptions.RedisClusterException
"""A Redis Cluster client's own failure (no node answers, the slot map cannot be read)."""

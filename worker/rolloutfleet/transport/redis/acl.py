"""The Redis ACL users of one job, as rules (pure: no client; the operator applies them).

Each RolloutJob gets a *worker* user and a *learner* user whose key patterns cover only that
job's keys (:mod:`.redis_keys`: all start with ``rolloutfleet:{<namespace>/<job>}`` or, for a
shard, ``rolloutfleet:{<namespace>/<job>/``; Kubernetes names hold no glob character, and
the namespace is part of every key and user name, so equal job names in two namespaces
never meet). Workers append to their batch streams and write their filters, heartbeats,
columns, backpressure and shard count, and append to the league's results stream; they may
*read* the weights, the global step, the learners' stamps, the room signal and the league's
plan and snapshots (``%R~``)
but write no weights key except ``held`` and ``model``, which they own. Workers may subscribe
to their job's weights announcements (``&``), and learners publish them. Learners may read and
write every key of their job. Neither may run ``FLUSHALL``, ``CONFIG``, ``KEYS``, ``SCAN``,
``DEBUG``, ``ACL`` or any command not listed here::

    >>> users = job_users("team-a", "cartpole")
    >>> users.worker.name, users.learner.name
    ('rolloutfleet/team-a/cartpole/worker', 'rolloutfleet/team-a/cartpole/learner')
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rolloutfleet.transport.redis.keys import PREFIX, job_keys

_CONNECTION = (
    "+auth", "+hello", "+ping", "+echo", "+select", "+client|setname", "+client|id",
    "+client|getname", "+info", "+time", "+command", "+readonly", "+readwrite", "+asking",
    "+cluster|slots", "+cluster|shards", "+cluster|nodes", "+cluster|info", "+cluster|myid",
)  # fmt: skip
"""Connecting, finding a Redis Cluster's nodes (redis-py asks COMMAND and CLUSTER SLOTS)."""
_SCRIPTS = ("+eval", "+evalsha", "+script|load", "+script|exists")
"""Lua: every command a script calls is checked against the same user's rules."""
_TRANSACTIONS = ("+multi", "+exec", "+discard", "+watch", "+unwatch")
_WORKER_DATA = (
    "+xadd", "+xlen", "+xpending", "+xtrim", "+xrevrange", "+xinfo|stream", "+xinfo|groups", "+xinfo|consumers", "+xread",
    "+get", "+set", "+del", "+exists", "+type", "+expire", "+pexpire", "+persist", "+ttl", "+pttl",
    "+hget", "+hmget", "+hset", "+hdel", "+hgetall", "+hlen", "+mget", "+getrange",
)  # fmt: skip
_WORKER_NEWS = ("+subscribe", "+unsubscribe")
"""The weights announcements (:attr:`~rolloutfleet.transport.redis.keys.JobKeys.weights_news`)."""
_LEARNER_DATA = (
    "+xreadgroup", "+xrange", "+xack", "+xclaim", "+xautoclaim", "+xdel", "+xgroup|create",
    "+xgroup|createconsumer", "+xgroup|delconsumer", "+xgroup|setid", "+xgroup|destroy", "+incr",
    "+strlen", "+publish",
)  # fmt: skip


@dataclass(frozen=True)
class AclUser:
    """One Redis user: its name and its rules (key patterns, then commands)."""

    name: str
    keys: tuple[str, ...]
    commands: tuple[str, ...]
    channels: tuple[str, ...] = ()
    """Pub/sub channel patterns (``&``); none by default (``resetchannels``)."""

    def setuser_args(self, password_hashes: list[str]) -> list[str]:
        """The arguments of ``ACL SETUSER`` that make this user exactly so (``reset`` first:
        applying twice is applying once). Passwords go as SHA-256 hashes (``#<hex>``): the
        plain password never travels to Redis in this command."""
        if not password_hashes:
            raise ValueError(f"user {self.name}: at least one password is needed")
        hashes = [f"#{digest}" for digest in password_hashes]
        return [self.name, "reset", "on", *hashes, "resetchannels", *self.channels, *self.keys, "-@all", *self.commands]


@dataclass(frozen=True)
class JobUsers:
    worker: AclUser
    learner: AclUser


def password_hash(password: str) -> str:
    """The SHA-256 hex digest Redis keeps of a password (``ACL GETUSER`` shows these)."""
    return hashlib.sha256(password.encode()).hexdigest()


def user_name(namespace: str, job: str, role: str) -> str:
    """``rolloutfleet/<namespace>/<job>/<role>``: the namespace keeps equal job names apart."""
    job_keys(namespace, job)  # ValueError for names Kubernetes would refuse
    return f"{PREFIX}/{namespace}/{job}/{role}"


def job_patterns(namespace: str, job: str) -> tuple[str, str]:
    """Glob patterns of every key of the job: its tag's keys and its shards' keys."""
    tag = job_keys(namespace, job).tag  # rolloutfleet:{ns/job}
    return f"{tag}:*", f"{tag[:-1]}/*}}:*"


def worker_keys(namespace: str, job: str) -> tuple[str, ...]:
    """What a worker may read and write (``~``), and what it may only read (``%R~``)."""
    tag = job_keys(namespace, job).tag
    shard_tag = f"{tag[:-1]}/*}}"
    owned = [f"{t}:{name}{suffix}" for t in (tag, shard_tag) for name in ("batches", "backpressure")
             for suffix in ("", ":*")]  # fmt: skip
    owned += [f"{tag}:{name}{suffix}" for name in ("shards", "columns", "filters") for suffix in ("", ":*")]
    owned += [f"{tag}:heartbeats"]
    owned += [f"{tag}:weights:{mid}{name}" for name in ("held", "model") for mid in ("", "*:")]
    owned += [f"{tag}:league:results"]  # spec.league: the matches its episodes played
    read = [f"{tag}:weights:*", f"{tag}:global-step", f"{tag}:league:plan", f"{tag}:league:snapshots",
            f"{tag}:league:blob:*"]  # fmt: skip
    read += [f"{t}:{name}{suffix}" for t in (tag, shard_tag) for name in ("learners", "room") for suffix in ("", ":*")]
    return (*(f"~{p}" for p in owned), *(f"%R~{p}" for p in read))


def job_users(namespace: str, job: str) -> JobUsers:
    """The job's worker and learner users (names, key and channel patterns, commands)."""
    news = (f"&{job_keys(namespace, job).tag}:weights:*",)  # every policy's announcements
    worker = AclUser(
        user_name(namespace, job, "worker"),
        worker_keys(namespace, job),
        (*_CONNECTION, *_SCRIPTS, *_TRANSACTIONS, *_WORKER_DATA, *_WORKER_NEWS),
        news,
    )
    learner = AclUser(
        user_name(namespace, job, "learner"),
        tuple(f"~{p}" for p in job_patterns(namespace, job)),
        (*_CONNECTION, *_SCRIPTS, *_TRANSACTIONS, *_WORKER_DATA, *_LEARNER_DATA),
        news,
    )
    return JobUsers(worker, learner)

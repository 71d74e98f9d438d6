"""``spec.redis``: where batches and weights meet the learner, and how the stream is bounded."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rolloutfleet.spec.model_base import SpecModel as _Model
from rolloutfleet.spec.redis_url import parse_redis_url
from rolloutfleet.spec.sections.network_spec import RedisTLSSpec

MAX_SHARDS = 64
"""The most batch streams one job may spread over (``spec.redis.shards``)."""
MAX_READ_REPLICAS = 64
"""The most read replicas a job's weights may come from (``spec.redis.readReplicas``)."""


class PasswordSecretRef(_Model):
    name: str
    key: str = "password"


class RedisSpec(_Model):
    """Where batches and weights meet the learner."""

    url: str = "redis://localhost:6379/0"
    """``redis://`` or ``rediss://`` (TLS). Never put a password here: use passwordSecret. Left
    out on Kubernetes: the Redis the operator was installed with, if it has one (its CA and
    per-job users with it)."""
    password_secret: PasswordSecretRef | None = None
    """Kubernetes Secret holding the password; workers read it from ROLLOUTFLEET_REDIS_PASSWORD."""
    tls: RedisTLSSpec | None = None
    """``caSecret``: the CA that verifies a ``rediss://`` server, mounted read-only in the workers."""
    admin_secret: PasswordSecretRef | None = None
    """A Secret in the job's namespace with an admin password (and optionally ``username``) of
    the job's own Redis: the operator mints the job's Redis users there (docs/operations/security.md)."""
    max_len: int = Field(default=1000, ge=1)
    """Upper bound on entries kept in the job's batch stream."""
    backpressure: Literal["block", "dropOldest"] = "block"
    """When the stream is full: block the worker (with a timeout) or trim the oldest entries (counted)."""
    block_timeout_seconds: float = Field(default=60.0, gt=0)
    compression: Literal["none", "lz4", "zstd"] = "none"
    shards: int | None = Field(default=None, ge=1, le=MAX_SHARDS)
    """Batch streams of the job, each in its own hash slot (a Redis Cluster spreads them over
    its masters); worker ``i`` writes shard ``i % shards``. Unset: 1 on a plain Redis, one
    per master (at most 16) on a Redis Cluster."""

    read_replicas: list[str] = Field(default_factory=list, max_length=MAX_READ_REPLICAS)
    """Replicas of the Redis at ``url`` (``replicaof`` it, the same users and passwords) that
    serve the weights: worker ``i`` reads versions and hears announcements from replica
    ``i % len``, so a new version leaves the primary once per replica, not once per worker.
    A replica that cannot be read sends that worker's reads to the primary meanwhile."""

    @field_validator("url")
    @classmethod
    def _scheme(cls, value: str) -> str:
        parsed = parse_redis_url(value)  # BadRedisURL: one line without the credentials
        if parsed.password is not None:
            raise ValueError("must not contain a password; use passwordSecret")
        return value

    @field_validator("read_replicas")
    @classmethod
    def _replica_urls(cls, values: list[str]) -> list[str]:
        for index, value in enumerate(values):
            try:
                parsed = parse_redis_url(value)
            except ValueError as exc:
                raise ValueError(f"[{index}]: {exc}") from None
            if parsed.password is not None:
                raise ValueError(f"[{index}]: must not contain a password; replicas take the url's")
            if parsed.scheme == "unix":
                raise ValueError(f"[{index}]: a replica is a redis:// or rediss:// server, not a unix socket")
        return values

    @model_validator(mode="after")
    def _tls_needs_rediss(self) -> RedisSpec:
        # Without a url of its own, a job on Kubernetes gets the operator's (which may be rediss://).
        given = "url" in self.model_fields_set
        if (
            given
            and self.tls is not None
            and self.tls.ca_secret is not None
            and not self.url.lower().startswith("rediss://")
        ):
            raise ValueError("tls.caSecret verifies a TLS server: the url must start with rediss://")
        tls = self.url.lower().startswith("rediss://")
        for index, replica in enumerate(self.read_replicas):
            if given and replica.lower().startswith("rediss://") != tls:
                raise ValueError(
                    f"readReplicas[{index}]: use the url's scheme ({self.url.split(':', 1)[0]}://): "
                    "replicas are read with the same credentials and TLS"
                )
        return self

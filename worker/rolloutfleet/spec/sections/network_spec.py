"""How a job's workers reach the network: ``spec.redis.tls`` (the CA that verifies a
``rediss://`` server) and ``spec.network`` (egress beyond Redis and DNS). Read by the
operator; a local run ignores ``spec.network``.

A worker pod may reach only Redis and DNS when the operator writes NetworkPolicies (the
chart's default); ``spec.network.egress`` adds rules, each a Kubernetes
NetworkPolicyEgressRule (``to``: peers, ``ports``), for envs that need the network.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rolloutfleet.spec.model_base import SpecModel

MAX_EGRESS_RULES = 32
CA_MOUNT_DIR = "/etc/rolloutfleet/redis-ca"
"""Where the operator mounts ``spec.redis.tls.caSecret`` (read-only) in a worker pod."""
CA_FILE_ENV = "ROLLOUTFLEET_REDIS_CA_FILE"
"""A PEM file of the CA(s) that verify a ``rediss://`` server (the operator mounts
``spec.redis.tls.caSecret`` there); unset: the system's trust store. A URL's own
``?ssl_ca_certs=PATH`` wins."""


class CASecretRef(SpecModel):
    """A key of a Secret in the job's namespace holding the CA certificate (PEM)."""

    name: str = Field(min_length=1)
    key: str = Field(default="ca.crt", min_length=1)


class RedisTLSSpec(SpecModel):
    """How workers verify a ``rediss://`` server."""

    ca_secret: CASecretRef | None = None
    """The CA that signed the server's certificate (only ``ca.crt``: never the server's key)."""


class EgressPort(SpecModel):
    """A NetworkPolicyPort."""

    port: int | str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    end_port: int | None = Field(default=None, ge=1, le=65535)

    @model_validator(mode="after")
    def _range(self) -> EgressPort:
        if self.end_port is not None and not isinstance(self.port, int):
            raise ValueError("endPort needs a numeric port")
        if isinstance(self.port, int) and not 1 <= self.port <= 65535:
            raise ValueError(f"port must be from 1 to 65535, got {self.port}")
        return self


class EgressRule(SpecModel):
    """A NetworkPolicyEgressRule: ``to`` holds NetworkPolicyPeers (podSelector,
    namespaceSelector, ipBlock), checked by the API server when the operator writes them."""

    to: list[dict[str, Any]] = Field(default_factory=list)
    ports: list[EgressPort] = Field(default_factory=list)


class NetworkSpec(SpecModel):
    """Egress of the worker pods beyond Redis and DNS."""

    egress: list[EgressRule] = Field(default_factory=list, max_length=MAX_EGRESS_RULES)

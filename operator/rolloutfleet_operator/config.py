"""What the operator is told by its Deployment (environment variables), in one object.

Each ``ROLLOUTFLEET_*`` variable, its meaning and its default: docs/operations/operator.md
("Settings"). A bad value stops the start-up with a :class:`ConfigError` naming the variable.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rolloutfleet_operator import __version__

DEFAULT_WORKER_IMAGE = f"ghcr.io/rolloutfleet/worker:{__version__}"
DEFAULT_WORKER_SLIM_IMAGE = f"{DEFAULT_WORKER_IMAGE}-slim"
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


class ConfigError(ValueError):
    """An operator setting is invalid; the message names the variable."""


@dataclass(frozen=True)
class OperatorConfig:
    worker_image: str = DEFAULT_WORKER_IMAGE
    worker_slim_image: str | None = DEFAULT_WORKER_SLIM_IMAGE
    worker_command: tuple[str, ...] = ("rolloutfleet", "worker")
    worker_metrics_port: int = 9100
    worker_port_per_index: bool = False
    grace_seconds: int = 30
    max_unavailable: float = 0.25
    read_progress: bool = True
    worker_memory: str | None = "192Mi"
    worker_torch_memory: str | None = "1Gi"
    worker_network_policy: bool = False
    redis_peers: tuple[dict[str, Any], ...] = ()
    redis_admin_url: str | None = None
    redis_admin_username: str | None = None
    redis_admin_password: str | None = field(default=None, repr=False)  # never printed
    default_redis_url: str | None = None
    """The Redis of a job whose manifest names none (the chart's): :mod:`.redis_defaults`."""
    default_redis_replicas: tuple[str, ...] = ()
    """The read replicas of that Redis (the chart's ``redis.readReplicas``), for the same jobs."""
    redis_ca_file: str | None = None
    """The CA that verifies the operator's ``rediss://`` Redis (the chart's), copied into the
    namespace of each job that uses the default Redis."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> OperatorConfig:
        env = _Environ(environ)
        slim_image = env.slim_image(cls.worker_slim_image)
        command = env.command(cls.worker_command)
        found = {
            "worker_image": env.get("WORKER_IMAGE"),
            "worker_metrics_port": env.number("WORKER_METRICS_PORT", int, 1, 65535),
            "worker_port_per_index": env.flag("WORKER_PORT_PER_INDEX"),
            "grace_seconds": env.number("GRACE_SECONDS", int, 0, 3600),
            "max_unavailable": env.number("MAX_UNAVAILABLE", float, 0.01, 1.0),
            "read_progress": env.flag("READ_PROGRESS"),
            "worker_network_policy": env.flag("WORKER_NETWORK_POLICY"),
            "redis_admin_url": _admin_url(env.get("REDIS_ADMIN_URL")),
            "default_redis_url": _admin_url(env.get("DEFAULT_REDIS_URL"), "DEFAULT_REDIS_URL"),
            "redis_ca_file": env.get("REDIS_CA_FILE"),
            "redis_admin_username": env.get("REDIS_ADMIN_USERNAME"),
            "redis_admin_password": env.get("REDIS_ADMIN_PASSWORD"),
        }
        return cls(
            worker_command=command,
            worker_slim_image=slim_image,
            worker_memory=env.memory("WORKER_MEMORY", cls.worker_memory),
            worker_torch_memory=env.memory("WORKER_TORCH_MEMORY", cls.worker_torch_memory),
            redis_peers=_peers(env.get("REDIS_PEERS")),
            default_redis_replicas=tuple(
                str(_admin_url(url.strip(), "DEFAULT_REDIS_REPLICAS"))
                for url in (env.get("DEFAULT_REDIS_REPLICAS") or "").split(",")
                if url.strip()
            ),
            **{k: v for k, v in found.items() if v is not None},  # type: ignore[arg-type]
        )

    def metrics_port(self, index: int) -> int:
        return self.worker_metrics_port + index if self.worker_port_per_index else self.worker_metrics_port


class _Environ:
    """The ``ROLLOUTFLEET_<NAME>`` variables, read and checked: unset or empty is None, a bad
    value one :class:`ConfigError` naming its variable."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ

    def get(self, name: str) -> str | None:
        value = self.environ.get(f"ROLLOUTFLEET_{name}")
        return value if value not in (None, "") else None

    def number(self, name: str, kind: type[int] | type[float], low: float, high: float) -> float | None:
        raw = self.get(name)
        if raw is None:
            return None
        try:
            value = kind(raw)
        except ValueError:
            raise ConfigError(f"ROLLOUTFLEET_{name}: not a number: {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"ROLLOUTFLEET_{name}: must be between {low} and {high}, got {raw}")
        return value

    def flag(self, name: str) -> bool | None:
        raw = self.get(name)
        if raw is None:
            return None
        if raw.lower() not in ("0", "1", "true", "false"):
            raise ConfigError(f"ROLLOUTFLEET_{name}: must be 0/1/true/false, got {raw!r}")
        return raw.lower() in ("1", "true")

    def memory(self, name: str, default: str | None) -> str | None:
        """A memory quantity; ``none``: no default."""
        raw = self.get(name)
        if raw is None:
            return default
        if raw.lower() == "none":
            return None
        if not _QUANTITY.match(raw):
            raise ConfigError(f"ROLLOUTFLEET_{name}: must be a memory quantity like 192Mi or 1Gi, or none; got {raw!r}")
        return raw

    def slim_image(self, default: str | None) -> str | None:
        """``WORKER_SLIM_IMAGE``; ``none``: the worker image for every job."""
        slim = self.get("WORKER_SLIM_IMAGE")
        return default if slim is None else None if slim.lower() == "none" else slim

    def command(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """``WORKER_COMMAND``, a JSON list of strings."""
        raw = self.get("WORKER_COMMAND")
        if raw is None:
            return default
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, list) or not parsed or not all(isinstance(p, str) for p in parsed):
            raise ConfigError(f"ROLLOUTFLEET_WORKER_COMMAND: must be a JSON list of strings, got {raw!r}")
        return tuple(parsed)


def _peers(raw: str | None) -> tuple[dict[str, Any], ...]:
    """``ROLLOUTFLEET_REDIS_PEERS``: a JSON list of objects (NetworkPolicyPeers)."""
    if raw is None or not raw.strip():
        return ()
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, list) or not all(isinstance(p, dict) for p in parsed):
        raise ConfigError(f"ROLLOUTFLEET_REDIS_PEERS: must be a JSON list of NetworkPolicyPeer objects, got {raw!r}")
    return tuple(parsed)


def _admin_url(raw: str | None, name: str = "REDIS_ADMIN_URL") -> str | None:
    """A Redis URL setting (the admin URL, the default one), checked; it must hold no
    password (the admin's comes by secretKeyRef, a job's users are minted)."""
    from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url

    if raw is None:
        return None
    try:
        parsed = parse_redis_url(raw)
    except BadRedisURL as error:
        raise ConfigError(f"ROLLOUTFLEET_{name}: {error}") from None
    if parsed.password is not None:
        raise ConfigError(f"ROLLOUTFLEET_{name}: must hold no password; set ROLLOUTFLEET_REDIS_ADMIN_PASSWORD")
    return raw

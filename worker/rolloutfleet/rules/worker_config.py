"""What a worker process is told by its environment (the operator's pod spec or the local fleet).

| variable | meaning |
| --- | --- |
| ``ROLLOUTFLEET_JOB_NAME``, ``ROLLOUTFLEET_NAMESPACE`` | the RolloutJob |
| ``ROLLOUTFLEET_WORKER_INDEX``, ``ROLLOUTFLEET_NUM_WORKERS`` | this worker's place in the job |
| ``ROLLOUTFLEET_SPEC`` or ``ROLLOUTFLEET_SPEC_FILE`` | the job's spec (or whole manifest) as JSON / a file |
| ``ROLLOUTFLEET_REDIS_URL``, ``ROLLOUTFLEET_REDIS_PASSWORD`` | where to publish (overrides ``spec.redis.url``) |
| ``ROLLOUTFLEET_REDIS_USERNAME`` | the Redis ACL user (the operator's ``<job>-redis-worker`` Secret; read by the client) |
| ``ROLLOUTFLEET_METRICS_PORT`` | Prometheus ``/metrics``, ``/healthz``, ``/readyz`` (default 9100; 0: any free port) |
| ``ROLLOUTFLEET_REDIS_STARTUP_TIMEOUT_SECONDS`` | give up (one line, exit 4) when Redis was never reached for this long; unset (the operator's pods): retry without bound, unready |
| ``ROLLOUTFLEET_CPUS`` | the CPUs the pod requested (1 where none): at most this many env processes (``async``); read by :mod:`rolloutfleet.sampling.vector.processes`; unset: the CPUs the process may use |
| ``ROLLOUTFLEET_EXTERNAL_PORT`` | an external env's action endpoint (overrides ``spec.env.external.port``; 0: any free port); read by :mod:`rolloutfleet.external.runner` |
| ``ROLLOUTFLEET_LISTEN_HOST`` | the IP address the probes and metrics endpoint and an external job's action server bind (default ``0.0.0.0``; ``rolloutfleet run``: ``127.0.0.1`` unless ``--listen``) |
| ``ROLLOUTFLEET_LEARNER_IDLE_SECONDS`` | a consumer group none of whose consumers read for this long no longer holds ``block`` backpressure (default 120) |

Pure: parsing only, errors name the variable.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rolloutfleet.spec.job import RolloutJob, SpecError
from rolloutfleet.spec.manifest_yaml import ManifestLoader, yaml_problem
from rolloutfleet.spec.redis_url import BadRedisURL, parse_redis_url

PREFIX = "ROLLOUTFLEET_"
LISTEN_HOST_ENV = PREFIX + "LISTEN_HOST"
"""The address a worker's listeners bind (probes and metrics, an external job's action
server): every interface in a pod (behind the job's NetworkPolicy), loopback under
``rolloutfleet run`` unless ``--listen`` says otherwise."""


@dataclass(frozen=True)
class WorkerConfig:
    job: RolloutJob
    worker_index: int
    num_workers: int
    redis_url: str
    redis_password: str | None = field(default=None, repr=False)  # never printed
    metrics_port: int = 9100
    learner_idle_s: float | None = None
    """None: the publisher's default (:data:`rolloutfleet.transport.redis.backpressure.DEFAULT_LEARNER_IDLE_S`)."""
    redis_startup_timeout_s: float | None = None
    """None: a Redis never reached yet is waited for without bound (the worker stays unready)."""
    listen_host: str = "0.0.0.0"
    """What the worker's listeners bind (:data:`LISTEN_HOST_ENV`)."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> WorkerConfig:
        def get(name: str, default: str | None = None) -> str:
            value = environ.get(PREFIX + name, default)
            if value is None or value == "":
                raise SpecError(f"{PREFIX}{name}: not set (the operator or `rolloutfleet run` sets it)")
            return value

        def integer(name: str, default: str | None = None, minimum: int = 0) -> int:
            raw = get(name, default)
            try:
                value = int(raw)
            except ValueError:
                raise SpecError(f"{PREFIX}{name}: must be an integer, got {raw!r}") from None
            if value < minimum:
                raise SpecError(f"{PREFIX}{name}: must be >= {minimum}, got {value}")
            return value

        job = _load_job(environ, get("JOB_NAME"), environ.get(PREFIX + "NAMESPACE") or "default")
        index = integer("WORKER_INDEX")
        workers = integer("NUM_WORKERS", str(max(job.spec.replicas, 1)), minimum=1)
        if index >= workers:
            raise SpecError(f"{PREFIX}WORKER_INDEX: {index} is not below {PREFIX}NUM_WORKERS={workers}")
        redis_url = environ.get(PREFIX + "REDIS_URL") or job.spec.redis.url
        try:
            parse_redis_url(redis_url)
        except BadRedisURL as exc:
            where = f"{PREFIX}REDIS_URL" if environ.get(PREFIX + "REDIS_URL") else "spec.redis.url"
            raise SpecError(f"{where}: {exc}") from None
        return cls(
            job=job,
            worker_index=index,
            num_workers=workers,
            redis_url=redis_url,
            redis_password=environ.get(PREFIX + "REDIS_PASSWORD") or None,
            metrics_port=integer("METRICS_PORT", "9100"),
            learner_idle_s=_seconds(environ, "LEARNER_IDLE_SECONDS"),
            redis_startup_timeout_s=_seconds(environ, "REDIS_STARTUP_TIMEOUT_SECONDS"),
            listen_host=listen_host(environ),
        )

    def to_environ(self) -> dict[str, str]:
        """The variables that make a worker process with this configuration."""
        env = {
            PREFIX + "JOB_NAME": self.job.name,
            PREFIX + "NAMESPACE": self.job.namespace,
            PREFIX + "WORKER_INDEX": str(self.worker_index),
            PREFIX + "NUM_WORKERS": str(self.num_workers),
            PREFIX + "SPEC": json.dumps(self.job.to_dict()["spec"]),
            PREFIX + "REDIS_URL": self.redis_url,
            PREFIX + "METRICS_PORT": str(self.metrics_port),
        }
        if self.listen_host != "0.0.0.0":
            env[LISTEN_HOST_ENV] = self.listen_host
        if self.redis_password:
            env[PREFIX + "REDIS_PASSWORD"] = self.redis_password
        if self.learner_idle_s is not None:
            env[PREFIX + "LEARNER_IDLE_SECONDS"] = f"{self.learner_idle_s:g}"
        if self.redis_startup_timeout_s is not None:
            env[PREFIX + "REDIS_STARTUP_TIMEOUT_SECONDS"] = f"{self.redis_startup_timeout_s:g}"
        return env


def listen_host(environ: Mapping[str, str]) -> str:
    """:data:`LISTEN_HOST_ENV`, an IP address (default ``0.0.0.0``: every interface); a
    SpecError naming the variable for anything else (a host name would bind one address of
    several, unpredictably)."""
    raw = environ.get(LISTEN_HOST_ENV) or "0.0.0.0"
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise SpecError(f"{LISTEN_HOST_ENV}: must be an IP address (127.0.0.1, 0.0.0.0, ::1), got {raw!r}") from None


def _seconds(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(PREFIX + name, "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise SpecError(f"{PREFIX}{name}: must be a number of seconds, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise SpecError(f"{PREFIX}{name}: must be > 0 and finite, got {raw!r}")
    return value


def _load_job(environ: Mapping[str, str], name: str, namespace: str) -> RolloutJob:
    if PREFIX + "SPEC" in environ:
        source, text = PREFIX + "SPEC", environ[PREFIX + "SPEC"]
        try:
            data: Any = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SpecError(f"{source}: not valid JSON: {exc}") from None
    elif PREFIX + "SPEC_FILE" in environ:
        source = PREFIX + "SPEC_FILE"
        path = Path(environ[source])
        try:
            data = yaml.load(path.read_text(), Loader=ManifestLoader)
        except OSError as exc:
            raise SpecError(f"{source}: cannot read {path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise SpecError(f"{source}: cannot read {path}: {yaml_problem(exc)}") from None
    else:
        raise SpecError(f"{PREFIX}SPEC: not set (nor {PREFIX}SPEC_FILE): the worker needs the job's spec")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: must hold a RolloutJob spec object")
    manifest = data if "spec" in data else {"spec": data}
    manifest = {**manifest, "metadata": {"name": name, "namespace": namespace}}
    try:
        return RolloutJob.from_dict(manifest)
    except SpecError as exc:
        raise SpecError(f"{source}: {exc}") from None

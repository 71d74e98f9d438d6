"""Checks a command makes before it starts: is the Redis it was given there? Are the ports
its workers will listen on free?"""

from __future__ import annotations

import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rolloutfleet.spec.job import RolloutJob


def unreachable(command: str, url: str, timeout_s: float) -> int | None:
    """Start-up check: None when Redis at ``url`` answers within ``timeout_s`` (retried while
    it is away; a wrong password at once); else one line on stderr and the exit code."""
    from rolloutfleet.transport.redis.connection import check_reachable
    from rolloutfleet.transport.redis.errors import BackendError

    try:
        check_reachable(url, timeout_s=timeout_s)
    except ValueError as exc:  # not a Redis URL
        print(f"rolloutfleet {command}: --redis {exc}", file=sys.stderr)
        return 2
    except BackendError as exc:
        print(f"rolloutfleet {command}: {exc}", file=sys.stderr)
        return 1
    return None


def taken_port(job: RolloutJob, host: str) -> str | None:
    """The first port an external job's workers will serve actions on (every worker the job
    may have: ``autoscaling.maxReplicas``) that something on ``host`` already holds, in one line
    naming it; None when all are free. Bound as the server binds (``SO_REUSEADDR``: a socket
    in TIME_WAIT is no conflict), then released at once."""
    from rolloutfleet.spec.sections.external import local_port

    external = job.spec.env.external
    if external is None:
        return None
    scaling = job.spec.autoscaling
    workers = scaling.max_replicas if scaling is not None else job.spec.replicas
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for index in range(workers):
        port = local_port(external, index)
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                return (
                    f"spec.env.external.port: {host}:{port} (worker {index}'s) is taken ({exc.strerror}): another "
                    "fleet or program listens there; stop it, or give this job another port"
                )
    return None

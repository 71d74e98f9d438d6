"""Checks a command makes before it starts: is the Redis it was given there?"""

from __future__ import annotations

import sys


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

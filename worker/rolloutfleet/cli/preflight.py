"""Checks a command makes before it starts: is the Redis it was given there?"""

from __future__ import annotations

import sys


def unreachable(command: str, url: str, timeout_s: float) -> int | None:
    """Start-up check: None when Redis at ``url`` answers within ``timeout_s`` (retried while
    it is away; a wrong password at once); else one line on stderr and the exit code."""
    import redis

    from rolloutfleet.transport.connection import check_reachable

    try:
        check_reachable(url, timeout_s=timeout_s)
    except ValueError as exc:  # not a Redis URL
        print(f"rolloutfleet {command}: --redis {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"rolloutfleet {command}: {exc}", file=sys.stderr)
        return 1
    return None

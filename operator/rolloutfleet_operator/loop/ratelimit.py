"""A token bucket for the operator's writes to the API server (pods, status, PDBs, Services).

:class:`TokenBucket` lets ``rate`` calls a second through on average, ``burst`` at once
after a quiet spell; :meth:`TokenBucket.delay` is the pure part (how long a call waits),
:meth:`TokenBucket.acquire` the asyncio one. Together with the calls-in-flight bound
(:data:`.api_calls.API_CONCURRENCY`) it caps what one operator can ask of the API server
however big a job is: a 10 000-worker job starts at most :data:`.api_calls.API_QPS` pods a
second, and a slow API server slows it further (fewer calls return per second).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    rate: float  # tokens added per second
    burst: float  # most tokens held
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(default=-1.0)  # starts full
    stamp: float = field(default=-1.0)

    def delay(self) -> float:
        """Take one token (possibly one not yet added): the seconds to wait before using it."""
        now = self.clock()
        if self.stamp < 0:
            self.tokens, self.stamp = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= 1
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    async def acquire(self) -> None:
        wait = self.delay()
        if wait > 0:
            await asyncio.sleep(wait)

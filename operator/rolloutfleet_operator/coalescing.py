"""Reconcile rounds that coalesce their triggers.

Every trigger of a job (its own events, its pods' events, the timer) asks for a round;
while one is pending or running, further asks only mark the job dirty, and it goes round
once more. Each round first waits as long as the last one took (at least
:data:`SETTLE_S`, at most :data:`MAX_SETTLE_S`): the events that arrive meanwhile join
that round, so a job of n pods costs O(n) per round and a bounded share of the CPU, not
O(n) per pod event — 1 000 pod events cost a handful of rounds, not 1 000.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

SETTLE_S = 0.05  # shortest wait for more events before a round
MAX_SETTLE_S = 2.0  # longest: a slow round must not delay the next one without bound


@dataclass
class Rounds:
    """The coalescing state of one job: whether a round is wanted, and how long the last took."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # held while rounds are pending or running
    dirty: bool = False  # asked for since the current round started
    last_seconds: float = 0.0  # how long the last round took


async def run_coalesced(
    rounds: Rounds,
    run_round: Callable[[], Awaitable[float | None]],
    requeue_within_s: float,
    settle_s: float = SETTLE_S,
    max_settle_s: float = MAX_SETTLE_S,
) -> None:
    """Run ``run_round`` soon, or make the rounds already pending or running go once more.

    The caller that finds no rounds running runs them all and returns when the job is
    clean; any other caller returns at once. ``run_round`` returns the seconds until it
    wants to run again (a restart's backoff ends), or None: a wish within
    ``requeue_within_s`` (before the next timer tick would come) is waited for here.
    """
    rounds.dirty = True
    if rounds.lock.locked():
        return
    async with rounds.lock:
        while rounds.dirty:
            await asyncio.sleep(max(settle_s, rounds.last_seconds))
            rounds.dirty = False
            started = time.perf_counter()
            requeue = await run_round()
            rounds.last_seconds = min(time.perf_counter() - started, max_settle_s)
            if requeue is not None and requeue <= requeue_within_s:
                await asyncio.sleep(requeue)
                rounds.dirty = True

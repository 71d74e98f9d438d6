"""Reconcile rounds that coalesce their triggers.

Every trigger of a job (its own events, its pods' events, the timer) asks for a round;
while one is pending or running, further asks only mark the job dirty, and it goes round
once more. Each round first waits :data:`SETTLE_FACTOR` times as long as the last one
took (at least :data:`SETTLE_S`, at most :data:`MAX_SETTLE_S`): the events that arrive
meanwhile join that round, so a job of n pods costs O(n) per round, not per pod event, and
its rounds take at most 1 / (1 + SETTLE_FACTOR) of a core however big the job: the CPU a
start costs per pod stays flat from 1 000 to 10 000 pods (it grew when the wait equalled
the round: rounds took half a core at 10 000 pods, a tenth at 1 000).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

SETTLE_S = 0.05  # shortest wait for more events before a round
MAX_SETTLE_S = 2.0  # longest: a slow round must not delay the next one without bound
SETTLE_FACTOR = 3.0  # wait this many times the last round's duration: rounds use <= 25 % of a core


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
    settle_factor: float = SETTLE_FACTOR,
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
            await asyncio.sleep(settle_wait(rounds.last_seconds, settle_s, max_settle_s, settle_factor))
            rounds.dirty = False
            started = time.perf_counter()
            requeue = await run_round()
            rounds.last_seconds = time.perf_counter() - started
            if requeue is not None and requeue <= requeue_within_s:
                await asyncio.sleep(requeue)
                rounds.dirty = True


def settle_wait(last_seconds: float, settle_s: float, max_settle_s: float, settle_factor: float) -> float:
    """How long a round waits for more events, after one that took ``last_seconds``.

    >>> [round(settle_wait(last, 0.05, 2.0, 3.0), 3) for last in (0.001, 0.2, 5.0)]
    [0.05, 0.6, 2.0]
    """
    return min(max_settle_s, max(settle_s, settle_factor * last_seconds))

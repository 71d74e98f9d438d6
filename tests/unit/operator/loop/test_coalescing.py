"""Reconcile rounds: triggers during a round coalesce into one more round, each round
waits as long as the last one took, and a restart due soon is waited for."""

from __future__ import annotations

import asyncio
import time

import pytest

from rolloutfleet_operator.loop.coalescing import SETTLE_FACTOR, Rounds, run_coalesced, settle_wait

pytestmark = pytest.mark.asyncio


async def test_triggers_during_a_round_cost_one_more_round_not_one_each() -> None:
    rounds, release, ran = Rounds(), asyncio.Event(), []

    async def run_round() -> None:
        ran.append(time.perf_counter())
        if len(ran) == 1:
            await release.wait()

    first = asyncio.create_task(run_coalesced(rounds, run_round, requeue_within_s=5.0, settle_s=0.0))
    while not ran:
        await asyncio.sleep(0)
    # A thousand pod events arrive while the first round runs: each returns at once.
    await asyncio.gather(*(run_coalesced(rounds, run_round, requeue_within_s=5.0) for _ in range(1000)))
    assert len(ran) == 1 and rounds.dirty and not first.done()
    release.set()
    await first
    assert len(ran) == 2 and not rounds.dirty and not rounds.lock.locked()


async def test_a_round_waits_as_long_as_the_last_one_took() -> None:
    rounds, ran = Rounds(), []

    async def run_round() -> None:
        ran.append(time.perf_counter())
        if len(ran) == 1:
            await asyncio.sleep(0.2)
            rounds.dirty = True  # a trigger during the round (the lock being held)
        return None

    await run_coalesced(rounds, run_round, requeue_within_s=5.0, settle_s=0.01)
    assert len(ran) == 2
    assert ran[1] - ran[0] >= 0.2 + 0.2 * 0.9  # the round itself, then as long again to settle
    assert rounds.last_seconds < 0.2  # the second round was quick


async def test_the_wait_is_bounded_however_long_a_round_took() -> None:
    rounds = Rounds()

    async def slow_round() -> None:
        await asyncio.sleep(0.1)

    await run_coalesced(rounds, slow_round, requeue_within_s=5.0, settle_s=0.0, max_settle_s=0.02)
    assert rounds.last_seconds >= 0.1 * 0.9  # what it took ...
    assert settle_wait(rounds.last_seconds, 0.0, 0.02, SETTLE_FACTOR) == 0.02  # ... and what the next round waits


async def test_a_restart_due_before_the_next_tick_gets_a_round_of_its_own() -> None:
    rounds, ran = Rounds(), []

    async def run_round() -> float | None:
        ran.append(time.perf_counter())
        return 0.1 if len(ran) == 1 else None

    await run_coalesced(rounds, run_round, requeue_within_s=5.0, settle_s=0.0)
    assert len(ran) == 2 and ran[1] - ran[0] >= 0.1 * 0.9


async def test_a_restart_due_after_the_next_tick_is_left_to_the_timer() -> None:
    rounds, ran = Rounds(), []

    async def run_round() -> float | None:
        ran.append(time.perf_counter())
        return 5.5

    await run_coalesced(rounds, run_round, requeue_within_s=5.0, settle_s=0.0)
    assert len(ran) == 1 and not rounds.lock.locked()


async def test_the_wait_is_a_multiple_of_the_last_round_within_bounds() -> None:
    # Rounds of a 10 000-pod job take ~0.1-0.2 s: waiting 3x as long keeps them to a quarter of a core.
    assert settle_wait(0.2, settle_s=0.05, max_settle_s=2.0, settle_factor=3.0) == pytest.approx(0.6)
    assert settle_wait(0.001, settle_s=0.05, max_settle_s=2.0, settle_factor=3.0) == 0.05  # small jobs: the floor
    assert settle_wait(60.0, settle_s=0.05, max_settle_s=2.0, settle_factor=3.0) == 2.0  # a long create round: capped
    busy = 0.2 / (0.2 + settle_wait(0.2, 0.05, 2.0, SETTLE_FACTOR))
    assert busy <= 0.25 + 1e-9

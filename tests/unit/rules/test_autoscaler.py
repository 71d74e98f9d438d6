"""The autoscaling rule on traces of a learner and a fleet: steady, a step change, noise, a
learner restarting, Redis away. The traces come from a fluid model of the stream (below):
the learner wants ``appetite`` rows/s, each worker makes ``per_worker`` rows/s, the stream
holds ``capacity`` rows; what the learner waits for and what the workers wait on follow
from it, and reach the rule as the cumulative counters Redis would hold."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from rolloutfleet.rules.autoscale_signals import LearnerSample, Signals, WorkerSample
from rolloutfleet.rules.autoscaler import Autoscaler
from rolloutfleet.spec.sections.autoscaling import AutoscalingSpec

PER_WORKER = 1000.0


@dataclass
class Fleet:
    """A fluid model of one job: a learner, the fleet, the stream between them."""

    scaler: Autoscaler
    appetite: Callable[[float], float | None]  # rows/s the learner wants at t; None: no learner
    noise: float = 0.0
    capacity: float = 20_000.0
    startup: float = 0.0  # seconds a new worker makes nothing and writes no heartbeat
    seed: int = 0
    t: float = 0.0
    buffer: float = 0.0
    consumer: int = 0
    learner: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # elapsed, starved, rows
    workers: dict[int, list[float]] = field(default_factory=dict)  # index -> [blocked_s, born]
    last_read: float | None = None
    sizes: list[int] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)

    def jitter(self) -> float:
        return 1.0 + self.random.uniform(-self.noise, self.noise)

    def step(self, dt: float = 1.0, error: str | None = None) -> None:
        n, wants = self.scaler.replicas, self.appetite(self.t)
        for gone in [i for i in self.workers if i >= n]:
            del self.workers[gone]
        for i in range(n):
            self.workers.setdefault(i, [0.0, self.t])
        up = [i for i in range(n) if self.t - self.workers[i][1] >= self.startup]
        rates = {i: PER_WORKER * self.jitter() for i in up}
        supply = sum(rates.values()) * dt
        consumed, starved = 0.0, 0.0
        if wants is not None:
            if self.last_read is None or self.t - self.last_read > 5:  # a learner (re)starting: a new consumer
                self.consumer += 1
                self.learner = [0.0, 0.0, 0.0]
            wanted = wants * self.jitter() * dt
            consumed = min(wanted, self.buffer + supply)
            starved = 1.0 - consumed / wanted
            self.last_read = self.t
        room = self.capacity - self.buffer + consumed
        produced = min(supply, room)
        blocked = 1.0 - produced / supply if supply else 0.0
        self.buffer = max(0.0, self.buffer + produced - consumed)
        if wants is not None:
            self.learner = [self.learner[0] + dt, self.learner[1] + starved * dt, self.learner[2] + consumed]
        for i in up:
            self.workers[i][0] += blocked * dt
        self.t += dt
        learners = ()
        if self.last_read is not None:
            e, s, r = self.learner
            learners = (LearnerSample(f"learner/c{self.consumer}", int(self.last_read * 1000), e, s, int(r)),)
        signals = Signals(
            now=self.t,
            learners=learners,
            last_read_age_s=None if self.last_read is None else self.t - self.last_read,
            workers=tuple(WorkerSample(i, self.t, rates[i], self.workers[i][0], False) for i in up),
            error=error,
        )
        decision = self.scaler.observe(signals, self.t)
        self.sizes.append(decision.replicas)
        self.reasons.append(decision.reason)

    def run(self, seconds: int) -> None:
        for _ in range(seconds):
            self.step()


def scaler(replicas: int = 1, **spec: float) -> Autoscaler:
    settings = {"max_replicas": 20, "window_seconds": 30, "scale_down_seconds": 60, "idle_seconds": 120, **spec}
    return Autoscaler(AutoscalingSpec(**settings), replicas)  # type: ignore[arg-type]


def changes(sizes: list[int]) -> int:
    return sum(1 for a, b in itertools.pairwise(sizes) if a != b)


def direction_changes(sizes: list[int]) -> int:
    moves = [b - a for a, b in itertools.pairwise(sizes) if a != b]
    return sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))


def feeds(size: int, appetite: float) -> bool:
    """``size`` workers feed the learner, with at most one worker to spare (the ±1 of the issue)."""
    ideal = math.ceil(appetite * 1.1 / PER_WORKER)
    return ideal - 1 <= size <= ideal + 1 and size * PER_WORKER >= appetite


def test_steady_appetite_converges_in_one_step_and_stays() -> None:
    fleet = Fleet(scaler(1), appetite=lambda t: 3500.0)
    fleet.run(600)
    assert feeds(fleet.sizes[-1], 3500.0), fleet.reasons[-1]
    assert changes(fleet.sizes) <= 2, fleet.sizes  # 1 -> 4 (maybe one more correction), then nothing
    assert len(set(fleet.sizes[120:])) == 1
    assert "learner starved" in next(r for r in fleet.reasons if "->" in r)


def test_workers_slow_to_start_are_waited_for_not_taken_for_too_few() -> None:
    fleet = Fleet(scaler(1), appetite=lambda t: 3500.0, startup=25.0)
    fleet.run(600)
    assert feeds(fleet.sizes[-1], 3500.0) and changes(fleet.sizes) == 1, fleet.sizes
    assert any(r.startswith("waiting for the first heartbeat of 3 of 4 workers") for r in fleet.reasons)


def test_an_oversized_fleet_comes_down_to_the_appetite_without_undershooting() -> None:
    fleet = Fleet(scaler(12), appetite=lambda t: 3500.0)
    fleet.run(600)
    assert feeds(fleet.sizes[-1], 3500.0), fleet.reasons[-1]
    assert direction_changes(fleet.sizes) == 0, fleet.sizes  # down only: never below, back up
    down = next(r for r in fleet.reasons if "->" in r)
    assert down.startswith("workers blocked") and "12 -> 4 workers" in down


def test_step_changes_are_followed_each_once() -> None:
    steps = [(0, 2000.0), (600, 6000.0), (1200, 1000.0), (1800, 4000.0)]

    def appetite(t: float) -> float:
        return [a for start, a in steps if t >= start][-1]

    fleet = Fleet(scaler(1), appetite=appetite)
    fleet.run(2400)
    for end, (_, wants) in zip([600, 1200, 1800, 2400], steps, strict=True):
        assert feeds(fleet.sizes[end - 1], wants), (end, fleet.sizes[end - 1])
    assert changes(fleet.sizes) <= 2 * len(steps), fleet.sizes


def test_noise_makes_it_neither_flap_nor_drift() -> None:
    for seed in range(5):
        fleet = Fleet(scaler(1), appetite=lambda t: 5000.0, noise=0.25, seed=seed)
        fleet.run(1800)
        settled = fleet.sizes[300:]
        assert all(feeds(size, 5000.0) for size in settled), (seed, settled)
        assert changes(settled) <= 2, (seed, settled)
        assert direction_changes(fleet.sizes) <= 1, (seed, fleet.sizes)


def test_no_learner_goes_to_min_after_idle_seconds_and_a_learner_brings_it_back_at_once() -> None:
    present = [True]
    fleet = Fleet(scaler(1), appetite=lambda t: 4000.0 if present[0] else None)
    fleet.run(300)
    active = fleet.sizes[-1]
    assert active >= 4
    present[0] = False
    fleet.run(118)  # the last read was 1 s before the learner went: 119 s without one
    assert fleet.sizes[-1] == active  # inside idleSeconds: held
    assert "no learner data" in fleet.reasons[-1]
    fleet.run(1)
    assert fleet.sizes[-1] == 0 and fleet.reasons[-1].startswith("no learner has read for 120 s")
    fleet.run(200)
    assert set(fleet.sizes[-200:]) == {0}
    present[0] = True
    fleet.step()
    assert fleet.sizes[-1] == active, fleet.reasons[-1]  # the first look after the learner's read
    assert fleet.reasons[-1] == f"a learner reads again (1 s ago): 0 -> {active} workers"
    fleet.run(300)
    assert feeds(fleet.sizes[-1], 4000.0)


def test_a_learner_that_crashes_and_comes_back_inside_idle_seconds_keeps_the_fleet() -> None:
    present = [True]
    fleet = Fleet(scaler(1), appetite=lambda t: 3000.0 if present[0] else None)
    fleet.run(300)
    size = fleet.sizes[-1]
    present[0] = False
    fleet.run(90)  # crashed; its pod restarts
    present[0] = True
    fleet.run(300)
    assert min(fleet.sizes[300:]) == size and feeds(fleet.sizes[-1], 3000.0)
    assert fleet.consumer == 2  # it came back as a new consumer


def test_a_fleet_started_before_its_learner_goes_to_zero_after_idle_seconds() -> None:
    fleet = Fleet(scaler(3), appetite=lambda t: None)
    fleet.run(120)  # idleSeconds counted from the autoscaler's first look
    assert set(fleet.sizes) == {3}
    fleet.run(1)
    assert fleet.sizes[-1] == 0 and fleet.reasons[-1] == "no learner has read yet (idleSeconds 120): 3 -> 0 workers"


def test_redis_unreachable_holds_and_says_why_never_scaling_to_zero() -> None:
    fleet = Fleet(scaler(1), appetite=lambda t: 3000.0)
    fleet.run(200)
    size = fleet.sizes[-1]
    for _ in range(400):  # longer than idleSeconds
        fleet.step(error="redis unreachable: Connection refused")
    assert set(fleet.sizes[-400:]) == {size}
    assert fleet.reasons[-1] == f"redis unreachable: Connection refused: holding {size} workers"


def test_min_and_max_bound_every_decision() -> None:
    fleet = Fleet(scaler(1, min_replicas=2, max_replicas=3), appetite=lambda t: 9000.0)
    fleet.run(300)
    assert max(fleet.sizes) == 3 and fleet.reasons[-1].endswith("3 workers (maxReplicas)")
    quiet = Fleet(scaler(3, min_replicas=2, max_replicas=3), appetite=lambda t: None)
    quiet.run(200)
    assert quiet.sizes[-1] == 2


def test_the_reason_says_how_starved_and_the_step() -> None:
    fleet = Fleet(scaler(2, window_seconds=60), appetite=lambda t: 6000.0)
    fleet.run(61)
    reason = next(r for r in fleet.reasons if "->" in r)
    assert reason == "learner starved 67 % of the last 15 s: 2 -> 7 workers", reason  # a quarter window: enough


def first_change(sizes: list[int]) -> int:
    """Seconds (looks) from the start to the first change."""
    return next(i for i, (a, b) in enumerate(itertools.pairwise(sizes), start=1) if a != b)


def test_a_starved_learner_gets_its_need_after_a_quarter_of_the_window() -> None:
    fleet = Fleet(scaler(1, window_seconds=40), appetite=lambda t: 4000.0)
    fleet.run(600)
    assert 10 <= first_change(fleet.sizes) < 20, fleet.reasons[:20]  # a quarter of 40 s, not the whole
    assert fleet.sizes[first_change(fleet.sizes)] == 5  # ceil(4000 * 1.1 / 1000) at once
    assert changes(fleet.sizes) == 1, fleet.sizes


def test_scaling_down_still_waits_the_whole_window() -> None:
    fleet = Fleet(scaler(12, window_seconds=40), appetite=lambda t: 3500.0)
    fleet.run(300)
    assert first_change(fleet.sizes) >= 40 and fleet.sizes[-1] == 4, fleet.reasons[:45]


def look(scaler: Autoscaler, t: float, n: int, starved_s: float, rows: float) -> str:
    """One look at scripted signals: a learner read for ``t`` s, ``n`` workers making 1,000 rows/s each."""
    learner = LearnerSample("learner/c1", int(t * 1000), t, starved_s, int(rows))
    workers = tuple(WorkerSample(i, t, PER_WORKER, 0.0, False) for i in range(n))
    return scaler.observe(Signals(now=t, learners=(learner,), last_read_age_s=0.0, workers=workers), t).reason


def test_the_quick_look_goes_up_to_the_need_never_beyond_it() -> None:
    # 4 workers; the learner starved half its time taking 1,800 rows/s: appetite 3,600, need 4.
    autoscaler = scaler(4, window_seconds=40)
    reasons = [look(autoscaler, t, 4, starved_s=0.5 * t, rows=1800 * t) for t in range(1, 44)]
    assert all(r == "measuring the 40 s after the last change: 4 workers" for r in reasons[:39]), reasons
    assert reasons[40] == "learner starved 50 % of the last 40 s: 4 -> 5 workers", reasons[38:]  # the whole window


def test_a_learner_back_after_idling_gets_the_largest_size_of_its_last_run_not_the_last() -> None:
    def appetite(t: float) -> float | None:
        return 6000.0 if t < 300 or t >= 800 else 2000.0 if t < 600 else None

    fleet = Fleet(scaler(1), appetite=appetite)
    fleet.run(600)
    assert fleet.sizes[299] == 7 and fleet.sizes[-1] == 3, fleet.sizes  # fast: 7 workers; slow: 3
    fleet.run(200)
    assert fleet.sizes[-1] == 0
    fleet.run(1)
    assert fleet.reasons[-1] == "a learner reads again (1 s ago): 0 -> 7 workers"  # not the slow phase's 3
    fleet.run(300)
    assert set(fleet.sizes[-300:]) == {7}, fleet.reasons[-300:]  # fed at once: nothing to correct

"""The autoscaling rule, pure and in one place: the operator and ``rolloutfleet run`` both
feed it :class:`~rolloutfleet.rules.autoscale_signals.Signals` and carry out its :class:`Decision`.

* **Idle**: no learner group has read for ``idleSeconds``: ``minReplicas``. A learner reading
  again brings back at once the largest size recommended while a learner last read.
* **Starved** more than ``starvedRatio`` of the window: up to ``need`` = ``ceil(appetite *
  (1 + headroom) / rows one worker makes)``, at least one more. The appetite is the rows/s
  the learner consumed over the share of its time it was not starved.
* **Blocked** more than ``blockedRatio``, the learner fed: down to ``need`` (at least one
  while a learner reads), only to the largest size recommended within ``scaleDownSeconds``.
* After a change the window starts again once every worker has beaten; a quarter of it is
  enough to go up to ``need`` (not beyond), the rest waits the whole window. No learner data
  or an unreadable Redis holds, saying why. Details: docs/autoscaling.md.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from rolloutfleet.rules.autoscale_signals import LearnerSample, Signals, WorkerSample
from rolloutfleet.spec.sections.autoscaling import AutoscalingSpec

HEARTBEAT_FRESH_S = 30.0
"""A worker's heartbeat older than this (a removed worker's) is not read."""
MAX_STARVED = 0.95
"""The appetite is judged as if the learner were starved at most this share (no division by ~0)."""
QUICK_SHARE = 0.25
"""After a change, this share of ``windowSeconds`` is enough to scale up to the computed need."""


@dataclass(frozen=True)
class Decision:
    """What the autoscaler decided at one look, with the figures it decided on."""

    replicas: int
    previous: int
    reason: str
    starved_ratio: float | None = None
    blocked_ratio: float | None = None
    learner_rows_per_s: float | None = None
    worker_rows_per_s: float | None = None

    @property
    def changed(self) -> bool:
        return self.replicas != self.previous


@dataclass(frozen=True)
class _Window:
    starved: float | None
    blocked: float | None
    rows_per_s: float | None
    appetite: float | None
    per_worker: float | None


class Autoscaler:
    """The rule with its memory (samples of the last windows, recommendations, the size
    before idling). ``clock``: the caller's seconds (monotonic or unix), passed to :meth:`observe`."""

    def __init__(self, spec: AutoscalingSpec, replicas: int, last_active: int | None = None) -> None:
        self.spec = spec
        self.replicas = spec.clamp(replicas)
        self.last_active = last_active
        """The size a learner reading again brings back: the largest recommended while one last read."""
        self.peak = 0
        """The largest size recommended since a learner began reading (this active stretch)."""
        self.idle = False
        self.changed_at: float | None = None
        self.started_at: float | None = None
        self.per_worker: float | None = None
        """The last known rows one worker makes per second (kept while the fleet is at zero)."""
        self._learners: dict[str, deque[tuple[float, LearnerSample]]] = {}
        self._workers: dict[int, deque[tuple[float, WorkerSample]]] = {}
        self._recommended: deque[tuple[float, int]] = deque()
        self._first_beat: dict[int, float] = {}
        """Worker index -> when its first heartbeat since the last change was seen."""

    def resize(self, replicas: int, now: float) -> None:
        """The size was set from outside (``kubectl scale``): start again from it."""
        self.replicas, self.changed_at = self.spec.clamp(replicas), now
        self._first_beat.clear()

    def observe(self, signals: Signals, now: float) -> Decision:
        """One look at the signals at ``now`` (the caller's clock): the size to keep, and why."""
        if self.started_at is None:
            self.started_at = self.changed_at = now
        n = self.replicas
        if signals.error is not None:
            return Decision(n, n, f"{signals.error}: holding {n} workers")
        self._record(signals, now)
        spec = self.spec
        age = signals.last_read_age_s
        idle_for = now - self.started_at if age is None else age
        if idle_for >= spec.idle_seconds:
            heard = "no learner has read yet" if age is None else f"no learner has read for {age:.0f} s"
            if not self.idle and max(n, self.peak) > spec.min_replicas:
                self.last_active = max(n, self.peak)
            self.idle, self.peak = True, 0
            return self._to(spec.min_replicas, now, f"{heard} (idleSeconds {spec.idle_seconds})")
        if self.idle:
            self.idle = False
            self._forget()
            back = self.peak = max(spec.clamp(max(self.last_active or 1, 1)), n)
            return self._to(back, now, f"a learner reads again ({age:.0f} s ago)")
        if n < max(spec.min_replicas, 1):  # a learner reads and the fleet has none
            self.peak = spec.clamp(max(self.last_active or 1, 1))
            return self._to(self.peak, now, "a learner reads")
        return self._judge(now)

    def _judge(self, now: float) -> Decision:
        spec, n = self.spec, self.replicas
        assert self.changed_at is not None
        # The window starts once every worker has beaten since the last change (new workers
        # starting up are no measure of what n workers make), or 2 windows after it at most.
        missing = [i for i in range(n) if i not in self._first_beat]
        if missing and now - self.changed_at < 2 * spec.window_seconds:
            return Decision(n, n, f"waiting for the first heartbeat of {len(missing)} of {n} workers")
        began = max([self.changed_at, *self._first_beat.values()]) if not missing else self.changed_at
        measured = now - began
        if measured < spec.window_seconds:
            return self._quick(now, began) if measured >= QUICK_SHARE * spec.window_seconds else \
                Decision(n, n, f"measuring the {spec.window_seconds} s after the last change: {n} workers")  # fmt: skip
        w = self._window(now - spec.window_seconds)
        figures = {"starved_ratio": w.starved, "blocked_ratio": w.blocked,
                   "learner_rows_per_s": w.rows_per_s, "worker_rows_per_s": w.per_worker}  # fmt: skip
        if w.starved is None:
            self._recommend(now, n)
            reason = f"no learner data in the last {spec.window_seconds} s (a learner pausing or restarting?)"
            return Decision(n, n, f"{reason}: holding {n} workers", **figures)
        need = self._need(w)
        floor = max(spec.min_replicas, 1)
        starved, blocked = w.starved, w.blocked or 0.0
        window = f"of the last {spec.window_seconds} s"
        if starved > spec.starved_ratio:
            target = min(spec.max_replicas, max(n + 1, need or 0))
            self._recommend(now, target)
            reason = f"learner starved {starved * 100:.0f} % {window}"
            if target == n:
                return Decision(n, n, f"{reason}: {n} workers (maxReplicas)", **figures)
            return self._to(target, now, reason, **figures)
        if blocked > spec.blocked_ratio and starved <= spec.starved_ratio / 2 and need is not None:
            recommended = max(floor, min(n, need))
            self._recommend(now, recommended)
            stable = max(r for t, r in self._recommended if t >= now - spec.scale_down_seconds)
            reason = f"workers blocked {blocked * 100:.0f} % {window} (learner reads {w.rows_per_s:,.0f} rows/s, " \
                     f"one worker makes {w.per_worker:,.0f})"  # fmt: skip
            if stable < n:
                return self._to(stable, now, reason, **figures)
            return Decision(n, n, f"{reason}: {n} workers (recommended {recommended} within {spec.scale_down_seconds} s)",
                            **figures)  # fmt: skip
        self._recommend(now, n)
        steady = f"learner starved {starved * 100:.0f} %, workers blocked {blocked * 100:.0f} % {window}: {n} workers"
        return Decision(n, n, steady, **figures)

    def _quick(self, now: float, began: float) -> Decision:
        """Part of the window after a change: a starved learner gets the computed need at once."""
        spec, n = self.spec, self.replicas
        w = self._window(began)
        need = self._need(w)
        if w.starved is not None and w.starved > spec.starved_ratio and need is not None and need > n:
            target = min(spec.max_replicas, need)
            self._recommend(now, target)
            return self._to(target, now, f"learner starved {w.starved * 100:.0f} % of the last {now - began:.0f} s",
                            starved_ratio=w.starved, blocked_ratio=w.blocked, learner_rows_per_s=w.rows_per_s,
                            worker_rows_per_s=w.per_worker)  # fmt: skip
        return Decision(n, n, f"measuring the {spec.window_seconds} s after the last change: {n} workers")

    def _need(self, w: _Window) -> int | None:
        """Workers that feed the appetite with headroom, if both rates are known."""
        if w.appetite is None or not w.per_worker:
            return None
        return math.ceil(w.appetite * (1 + self.spec.headroom) / w.per_worker - 1e-9)

    def _to(self, target: int, now: float, why: str, **figures: float | None) -> Decision:
        previous = self.replicas
        if target == previous:
            return Decision(previous, previous, f"{why}: {previous} workers", **figures)  # type: ignore[arg-type]
        self.replicas, self.changed_at = target, now
        self._first_beat.clear()
        self._recommended.clear()
        self._recommended.append((now, target))
        return Decision(target, previous, f"{why}: {previous} -> {target} workers", **figures)  # type: ignore[arg-type]

    def _recommend(self, now: float, replicas: int) -> None:
        self._recommended.append((now, replicas))
        self.peak = max(self.peak, replicas)
        while self._recommended and self._recommended[0][0] < now - self.spec.scale_down_seconds:
            self._recommended.popleft()

    def _forget(self) -> None:
        self._learners.clear()
        self._workers.clear()
        self._recommended.clear()

    def _record(self, signals: Signals, now: float) -> None:
        keep = now - 2 * max(self.spec.window_seconds, 1)
        for sample in signals.learners:
            history = self._learners.setdefault(sample.consumer, deque())
            if history and sample.elapsed_s < history[-1][1].elapsed_s:
                history.clear()  # the same consumer name, started again: its counters began anew
            if not history or sample.elapsed_s != history[-1][1].elapsed_s:
                history.append((now, sample))
        for worker in signals.workers:
            if worker.index >= self.replicas or signals.now - worker.time > HEARTBEAT_FRESH_S:
                continue
            beats = self._workers.setdefault(worker.index, deque())
            if beats and worker.blocked_s < beats[-1][1].blocked_s:
                beats.clear()  # a restarted worker
            if not beats or worker.time != beats[-1][1].time:
                beats.append((now, worker))
                if self.changed_at is None or worker.time >= signals.now - (now - self.changed_at):
                    self._first_beat.setdefault(worker.index, now)
        _prune(self._learners, keep)
        _prune(self._workers, keep)
        # Rows one worker makes: the mean sampling speed of the heartbeats of the last window.
        rates = [w.steps_per_s for beats in self._workers.values() for t, w in beats
                 if w.steps_per_s > 0 and t >= now - self.spec.window_seconds]  # fmt: skip
        if rates:
            self.per_worker = sum(rates) / len(rates)

    def _window(self, start: float) -> _Window:
        """The signals over the samples seen since ``start`` (the caller's clock)."""
        groups: dict[str, list[tuple[float, float, float]]] = {}  # group -> (elapsed, starved, rows) deltas
        for history in self._learners.values():
            inside = [s for t, s in history if t >= start]
            if len(inside) >= 2 and inside[-1].elapsed_s > inside[0].elapsed_s:
                first, last = inside[0], inside[-1]
                groups.setdefault(last.group, []).append(
                    (last.elapsed_s - first.elapsed_s, last.starved_s - first.starved_s, last.rows - first.rows)
                )
        starved = rows_per_s = appetite = None
        for deltas in groups.values():
            elapsed = sum(e for e, _, _ in deltas)
            ratio = min(1.0, max(0.0, sum(s for _, s, _ in deltas) / elapsed))
            rate = sum(r / e for e, _, r in deltas)
            wants = sum((r / e) / (1 - min(MAX_STARVED, max(0.0, s / e))) for e, s, r in deltas)
            if appetite is None or wants > appetite:  # the hungriest group sizes the fleet
                starved, rows_per_s, appetite = ratio, rate, wants
        return _Window(starved, self._blocked(start), rows_per_s, appetite, self.per_worker)

    def _blocked(self, start: float) -> float | None:
        waited = lasted = 0.0
        for history in self._workers.values():
            inside = [w for t, w in history if t >= start]
            if len(inside) >= 2 and inside[-1].time > inside[0].time:
                waited += inside[-1].blocked_s - inside[0].blocked_s
                lasted += inside[-1].time - inside[0].time
        return min(1.0, max(0.0, waited / lasted)) if lasted > 0 else None


def _prune(histories: dict[Any, deque[tuple[float, Any]]], keep: float) -> None:
    """Drop samples seen before ``keep``, and histories left empty."""
    for key in list(histories):
        history = histories[key]
        while history and history[0][0] < keep:
            history.popleft()
        if not history:
            del histories[key]

"""The autoscaler's signals, as Redis holds them and as the rule (:mod:`rolloutfleet.rules.autoscaler`) reads them. Pure.

* **The learner's appetite**: every :class:`~rolloutfleet.transport.consumer.BatchConsumer`
  counts how long its ``get()``/``read()`` wait for rows (:class:`AppetiteMeter`: a read that
  comes back with fewer entries than it asked for found the stream dry) and the rows it was
  given, and writes both, with its own elapsed time, into the job's ``appetite`` hash at
  each read stamp (field ``<group>/<consumer>``, prefixed by Redis's clock, :data:`APPETITE_SCRIPT`).
  Counters are cumulative: the reader differences two samples for a window.
* **The workers' waits**: each heartbeat carries ``blocked_s``, the seconds its publishes
  waited for room under ``block`` backpressure, and ``steps_per_s``, its sampling speed.
* **When a learner last read**: the read stamps of :mod:`rolloutfleet.transport.redis.backpressure`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

APPETITE_SCRIPT = """
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], ARGV[1], now[1] .. string.format('%03d', math.floor(now[2] / 1000)) .. ' ' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
"""KEYS[1]: the job's ``appetite`` hash; ARGV: ``<group>/<consumer>``, :meth:`AppetiteMeter.payload`, TTL in ms."""


class AppetiteMeter:
    """One consumer's starved time and rows since it was made (its own monotonic clock).

    >>> meter = AppetiteMeter(clock=lambda: 10.0)
    >>> meter.fetched(0.4, full=False); meter.fetched(0.1, full=True); meter.delivered(64)
    >>> meter.payload(now=12.0)
    '{"elapsed_s": 2.0, "starved_s": 0.4, "rows": 64}'
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.started = clock()
        self.starved_s = 0.0
        self.rows = 0

    def fetched(self, seconds: float, full: bool) -> None:
        """A read took ``seconds``; ``full``: it came back with all the entries it asked for
        (rows were there: no wait), else the learner waited for rows that long."""
        if not full:
            self.starved_s += max(0.0, seconds)

    def delivered(self, rows: int) -> None:
        self.rows += rows

    def payload(self, now: float) -> str:
        return json.dumps(
            {"elapsed_s": round(now - self.started, 3), "starved_s": round(self.starved_s, 3), "rows": self.rows}
        )


@dataclass(frozen=True)
class LearnerSample:
    """One consumer's counters as Redis held them at ``at_ms`` (Redis time)."""

    consumer: str
    """``<group>/<consumer>``."""
    at_ms: int
    elapsed_s: float
    starved_s: float
    rows: int

    @property
    def group(self) -> str:
        return self.consumer.split("/", 1)[0]


@dataclass(frozen=True)
class WorkerSample:
    """One worker's heartbeat, as far as the autoscaler reads it."""

    index: int
    time: float
    """Unix time the worker wrote it."""
    steps_per_s: float
    blocked_s: float
    waiting_for_learner: bool


@dataclass(frozen=True)
class Signals:
    """What the autoscaler sees at one look (:func:`rolloutfleet.transport.appetite.read_signals`)."""

    now: float
    """Unix seconds (Redis's clock when it answered)."""
    learners: tuple[LearnerSample, ...] = ()
    last_read_age_s: float | None = None
    """Seconds since any learner group last asked for entries; None: never seen."""
    workers: tuple[WorkerSample, ...] = ()
    error: str | None = None
    """Redis could not be read: why (the autoscaler then holds the size)."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_appetite(raw: Mapping[bytes | str, bytes | str]) -> list[LearnerSample]:
    """The ``appetite`` hash as samples; garbled entries are skipped.

    >>> parse_appetite({b"learner/h-1": b'1000500 {"elapsed_s": 2.0, "starved_s": 0.5, "rows": 64}', b"x": b"?"})
    [LearnerSample(consumer='learner/h-1', at_ms=1000500, elapsed_s=2.0, starved_s=0.5, rows=64)]
    """
    samples = []
    for field, value in raw.items():
        stamp, _, payload = _text(value).partition(" ")
        try:
            data = json.loads(payload)
            samples.append(
                LearnerSample(
                    _text(field), int(stamp), float(data["elapsed_s"]), float(data["starved_s"]), int(data["rows"])
                )
            )
        except (ValueError, TypeError, KeyError):
            continue
    return sorted(samples, key=lambda s: s.consumer)


def last_read_ms(stamps: Mapping[bytes | str, bytes | str], learners: list[LearnerSample]) -> int | None:
    """Redis time (ms) any learner group last asked for entries: the ``learners`` hash's stamps
    (:mod:`rolloutfleet.transport.redis.backpressure`) and the appetite samples; None when neither has one."""
    seen = [int(v) for v in map(_text, stamps.values()) if v.isdigit()] + [s.at_ms for s in learners]
    return max(seen, default=None)


def worker_samples(beats: Mapping[int, Mapping[str, object]]) -> list[WorkerSample]:
    """The heartbeats (:func:`rolloutfleet.transport.heartbeat.parse_heartbeats`) as samples."""

    def number(beat: Mapping[str, object], name: str) -> float:
        value = beat.get(name, 0.0)
        return float(value) if isinstance(value, int | float) else 0.0

    return [
        WorkerSample(
            index,
            number(beat, "time"),
            number(beat, "steps_per_s"),
            number(beat, "blocked_s"),
            number(beat, "waiting_for_learner_since") > 0,
        )
        for index, beat in sorted(beats.items())
    ]

"""What a worker says while its publish waits for room in a full stream (``block`` backpressure).

Two waits, told apart by the publisher's own measure (:mod:`rolloutfleet.transport.redis.backpressure`):

* **waiting for a learner**: no consumer group has read the stream within ``learner_idle_s``
  (none yet: the fleet was started first; or the learner is gone). Healthy: the worker stays
  ready, keeps its fragment, says so once when the wait begins and once when it ends (how
  long it lasted), and its heartbeat carries since when (the job's ``WaitingForLearner``
  condition, ``rolloutfleet run``'s table);
* **a learner not keeping up**: a group reads, but has not made room within
  ``blockTimeoutSeconds``. One warning per stretch, one line when room comes; ready too.

Pure: the caller passes the clock (unix seconds) and logs the lines it gets back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WAITING_BEAT_S = 10.0
"""How often a worker waiting for a learner refreshes its heartbeat (which says since when)."""


@dataclass
class LearnerWait:
    """The waits of one worker (one per stream it publishes to would say the same: a fleet
    waits for its learner as one)."""

    since: float | None = None
    """Unix time this worker began to wait for a learner; None while it does not."""
    stream: str = ""
    slow_group: str | None = None
    """The learner group that has not made room within ``blockTimeoutSeconds``, while so."""
    slow_since: float = 0.0
    beat: tuple[float, float | None] = (0.0, None)
    """(monotonic time, ``since``) of the last heartbeat that said since when."""

    @property
    def waiting(self) -> bool:
        return self.since is not None

    def beat_due(self, monotonic: float) -> bool:
        """Whether the heartbeat should say since when: at once when that changed, else every
        :data:`WAITING_BEAT_S` while waiting."""
        last_at, last_since = self.beat
        return self.since != last_since or (self.since is not None and monotonic - last_at >= WAITING_BEAT_S)

    def absent(self, stream: str, waited_s: float, now: float, ignored: Sequence[str] = ()) -> str | None:
        """No consumer group reads the full ``stream`` (``waited_s`` into a publish's wait):
        the line that says the wait began, the first time.

        >>> wait = LearnerWait()
        >>> wait.absent("rolloutfleet:{default/cartpole}:batches", 2.0, now=100.0)[:73]
        'waiting for a learner to read rolloutfleet:{default/cartpole}:batches: th'
        >>> wait.since, wait.absent("rolloutfleet:{default/cartpole}:batches", 9.0, now=107.0)
        (98.0, None)
        """
        self.slow_group = None  # a group that stopped reading is no learner's any more
        if self.since is not None:
            return None
        self.since, self.stream = now - waited_s, stream
        left_out = f" (groups {', '.join(ignored)} have not read within learner_idle_s)" if ignored else ""
        return (
            f"waiting for a learner to read {stream}: the stream is full and no consumer group reads it{left_out}; "
            "the fragment in hand is kept and published once a learner makes room (`rolloutfleet streams` shows it)"
        )

    def reading(self, group: str, now: float) -> str | None:
        """Learner group ``group`` reads the stream: the line that ends a wait for a learner, if any."""
        return self.end(now, f"learner group {group!r} reads {self.stream}")

    def slow(self, group: str | None, stream: str, waited_s: float, now: float) -> str | None:
        """A publish gave up after ``waited_s`` on a learner group that reads but has not made
        room: a warning, once per stretch."""
        if group is None or self.slow_group == group:
            return None
        self.slow_group, self.slow_since = group, now - waited_s
        return (
            f"learner group {group!r} has not made room in {stream} for {waited_s:.1f} s (blockTimeoutSeconds): "
            "it is not keeping up; the fragment in hand is kept, waiting on"
        )

    def published(self, now: float) -> list[str]:
        """A publish went through: the lines that end the waits there were."""
        lines = []
        if self.slow_group is not None:
            lines.append(f"learner group {self.slow_group!r} made room after {now - self.slow_since:.1f} s")
            self.slow_group = None
        ended = self.end(now, f"there is room in {self.stream} again")
        return [*lines, ended] if ended else lines

    def end(self, now: float, why: str) -> str | None:
        """End a wait for a learner (``why``: what ended it); its line, with how long it lasted."""
        if self.since is None:
            return None
        line = f"stopped waiting for a learner after {max(0.0, now - self.since):.1f} s: {why}"
        self.since = None
        return line

"""``spec.autoscaling`` for ``rolloutfleet run``: the same rule as the operator's
(:mod:`rolloutfleet.rules.autoscaler`), fed from the same Redis signals
(:func:`rolloutfleet.transport.appetite.read_signals`), carried out by
:meth:`LocalFleet.resize <rolloutfleet.fleet.supervisor.LocalFleet.resize>` (removed workers
get SIGTERM and publish the fragment in hand). One line per decision worth saying: each
change, and each new kind of hold (the figures alone changing is not one).
"""

from __future__ import annotations

import re
import time

from rolloutfleet.fleet.supervisor import LocalFleet
from rolloutfleet.rules.autoscaler import Autoscaler, Decision
from rolloutfleet.transport.appetite import read_signals

LOOK_S = 2.0
"""How often the local fleet looks at the signals (the operator: every timer tick, 5 s)."""
IDLE_LOOK_S = 0.1
"""How often it looks while idle (no learner reading, the fleet at ``minReplicas``): a learner
that reads again gets its workers within this, plus a worker's start (forked: 0.2 to 0.4 s),
while it reads the rows the workers left in the stream (up to ``maxLen`` entries). A look is
a few reads of small hashes."""


class LocalAutoscaler:
    """Sizes a started :class:`LocalFleet` whose job has ``spec.autoscaling``."""

    def __init__(self, fleet: LocalFleet, look_s: float = LOOK_S, idle_look_s: float = IDLE_LOOK_S) -> None:
        spec = fleet.job.spec.autoscaling
        if spec is None:
            raise ValueError(f"{fleet.job.name}: spec.autoscaling is not set")
        self.fleet = fleet
        self.autoscaler = Autoscaler(spec, len(fleet.workers))
        self.decision: Decision | None = None
        self.look_s = look_s
        self.idle_look_s = min(idle_look_s, look_s)
        self._next = 0.0
        self._said = ""

    def due_in(self, now: float) -> float:
        """Seconds until the next look (0 when due): the caller's loop waits no longer."""
        return max(0.0, self._next - now)

    def tick(self, now: float | None = None) -> str | None:
        """Look at the signals if due and carry out the decision; the line to say, if any."""
        now = time.monotonic() if now is None else now
        if now < self._next:
            return None
        signals = read_signals(self.fleet.redis_url, self.fleet.job, self.fleet.redis_password)
        decision = self.decision = self.autoscaler.observe(signals, now)
        self._next = now + (self.idle_look_s if self.autoscaler.idle else self.look_s)
        if decision.changed:
            self.fleet.resize(decision.replicas, now)
        kind = re.sub(r"\d[\d,.]*", "#", decision.reason)
        if not decision.changed and kind == self._said:
            return None
        self._said = kind
        return f"autoscaling: {decision.reason}"

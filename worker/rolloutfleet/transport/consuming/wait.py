"""A learner's ``get()`` that waits for rows no one can send: the fleet's workers wait for room
(``block`` backpressure) that the learner's own group holds, because the rows it asks for
(for a learner of several ranks: every rank's) do not fit in the entries ``maxLen`` lets the
stream keep. Neither side moves again; the consumer says so, with the numbers, instead of
waiting in silence. The judgement is pure (:func:`own_hold_line`); :class:`StarvedWait`
reads the workers' record of who holds them back (:func:`~rolloutfleet.transport.redis.stream_status.read_hold`)
a few seconds into a wait, then every half minute.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from rolloutfleet.transport.redis.stream_status import Hold

log = logging.getLogger(__name__)

SAY_AFTER_S = 5.0
SAY_EVERY_S = 30.0


def own_hold_line(hold: Hold | None, group: str, stream: str, held_rows: int, min_steps: int, waited_s: float) -> str | None:  # fmt: skip
    """Why a wait for ``min_steps`` rows cannot end, or None when it may.

    >>> hold = Hold("ppo", since=0.0, held_s=9.0, unconsumed=4, max_len=4, ignored=(), learner_idle_s=30.0)
    >>> print(own_hold_line(hold, "ppo", "rolloutfleet:{default/cartpole}:batches", 6400, 10000, 12.0))
    get(min_steps=10000) has waited 12 s holding 6400 rows, and no more can come: the workers wait for group 'ppo' to acknowledge entries of rolloutfleet:{default/cartpole}:batches, and its consumers hold all 4 entries spec.redis.maxLen lets it keep. Ask get() for fewer rows, or raise maxLen to the entries one get takes for every consumer of the group, plus one each
    >>> own_hold_line(hold, "other", "s", 6400, 10000, 12.0) is None
    True
    """
    if hold is None or hold.group != group or hold.unconsumed < hold.max_len:
        return None
    return (
        f"get(min_steps={min_steps}) has waited {waited_s:.0f} s holding {held_rows} rows, and no more can come: the "
        f"workers wait for group {group!r} to acknowledge entries of {stream}, and its consumers hold all "
        f"{hold.unconsumed} entries spec.redis.maxLen lets it keep. Ask get() for fewer rows, or raise maxLen to the "
        "entries one get takes for every consumer of the group, plus one each"
    )


class StarvedWait:
    """The look a waiting ``get()`` takes at who holds the fleet back: :data:`SAY_AFTER_S` into
    the wait, then every :data:`SAY_EVERY_S`; a warning when it is the learner's own group."""

    def __init__(self, read_hold: Callable[[], Hold | None], group: str, stream: str) -> None:
        self._read_hold, self.group, self.stream = read_hold, group, stream
        self._started: float | None = None
        self._next = 0.0
        self.said = 0

    def start(self, now: float) -> None:
        self._started, self._next = now, now + SAY_AFTER_S

    def check(self, now: float, held_rows: int, min_steps: int) -> None:
        if self._started is None or now < self._next:
            return
        self._next = now + SAY_EVERY_S
        try:
            hold = self._read_hold()
        except Exception as exc:  # noqa: BLE001 - a diagnosis: it never fails the get() it watches
            log.debug("could not read who holds %s back: %s", self.stream, exc)
            return
        line = own_hold_line(hold, self.group, self.stream, held_rows, min_steps, now - self._started)
        if line is not None:
            self.said += 1
            log.warning(line)

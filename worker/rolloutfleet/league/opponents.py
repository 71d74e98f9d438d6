"""A worker's league opponents: which snapshot each episode plays, drawn from the plan the
learner publishes (:meth:`~.store.PolicyStore.publish_plan`), the snapshots' weights, and
the results of finished episodes, written to the results stream after each fragment.

It is the :class:`~rolloutfleet.sampling.multiagent.league_slots.OpponentSource` a worker
attaches to its multi-agent runner. The plan is read at most every ``planRefreshSeconds``;
a plan that cannot be read (Redis away) leaves the last one in force, said once a streak.
Results wait in the worker until Redis takes them (a failed flush keeps them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rolloutfleet.league.store import RESULTS_MAXLEN, MatchResult, PolicyStore
from rolloutfleet.spec.sections.league_spec import LeagueSpec
from rolloutfleet.transport.redis.errors import BackendError

log = logging.getLogger(__name__)


class LeagueOpponents:
    """Snapshots for one worker's episodes, from ``store`` as ``spec`` says."""

    def __init__(
        self,
        store: PolicyStore,
        spec: LeagueSpec,
        *,
        seed: int,
        worker_index: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.spec, self.worker_index, self.clock = store, spec, worker_index, clock
        self.rng = np.random.default_rng(seed)
        self.names: tuple[str, ...] = ()
        self.probabilities: np.ndarray = np.zeros(0)
        self._read_at = float("-inf")
        self._failing = False
        self.pending: list[MatchResult] = []
        self.loads = 0
        self.results = 0

    def pick(self) -> str | None:
        now = self.clock()
        if now - self._read_at >= self.spec.plan_refresh_seconds:
            self._read_at = now
            self._read_plan()
        if not self.names:
            return None
        return self.names[int(self.rng.choice(len(self.names), p=self.probabilities))]

    def _read_plan(self) -> None:
        try:
            plan = self.store.plan()
        except BackendError as exc:
            if not self._failing:
                log.warning("league plan %s not read (%s); playing the last one until it is", self.store.plan_key, exc)
            self._failing = True
            return
        self._failing = False
        self.names = tuple(sorted(plan))
        total = sum(plan.values())
        self.probabilities = np.array([plan[name] / total for name in self.names]) if total > 0 else np.zeros(0)
        if total <= 0:
            self.names = ()

    def load(self, name: str) -> Mapping[str, Any]:
        self.loads += 1
        return self.store.load(name)

    def finished(self, seats: Mapping[str, str], returns: Mapping[str, float]) -> None:
        if len(seats) >= 2:
            self.pending.append(MatchResult(dict(seats), dict(returns), worker=self.worker_index))

    def flush(self) -> int:
        """Write the finished episodes' results (one round trip); the number written."""
        if not self.pending:
            return 0
        pipe = self.store.client.pipeline(transaction=False)
        for result in self.pending:
            pipe.xadd(self.store.results_key, result.fields(), maxlen=RESULTS_MAXLEN, approximate=True)  # type: ignore[arg-type]
        pipe.execute()
        written, self.pending = len(self.pending), []
        self.results += written
        return written

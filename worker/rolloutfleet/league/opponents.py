"""A worker's league opponents: which snapshot each episode plays, drawn from the plan the
learner publishes (:meth:`~.store.PolicyStore.publish_plan`), the snapshots' weights, and
the results of finished episodes, written to the results stream after each fragment.

It is the :class:`~rolloutfleet.sampling.multiagent.league_slots.OpponentSource` a worker
attaches to its multi-agent runner. The plan is read at most every ``planRefreshSeconds``;
a plan that cannot be read (Redis away) leaves the last one in force, said once a streak.
Results wait in the worker until Redis takes them (a failed flush keeps them).

Picks are drawn ahead. After each load, the next picks' snapshots not read yet are asked
for without waiting (:meth:`~.store.PolicyStore.send_ahead`: their weights, or first the
metadata of those whose digest is not known under this plan), and the answer is read at
the next load, by then mostly arrived: a load waits neither for the round trip nor for
Redis to wake up. A snapshot not read that way is read when due together with the next
picks' (:meth:`~.store.PolicyStore.load_many`). How far ahead follows the share of picks
that needed a load so far: a worker whose slots hold most of its picks reads one at a time,
one that loads every game up to ``READ_AHEAD``. So a worker holds at most
``READ_AHEAD - 1`` snapshots besides its slots.

Given the slots' ``signature``, each snapshot read is fitted to the model
(:func:`~rolloutfleet.data.weights_check.check_weights`: names, shapes, dtypes, finite
values) and loads as :class:`~rolloutfleet.data.weights_check.CheckedWeights`, which a slot
does not check again. Snapshots are content-addressed: weights whose digest passed once are
the same bytes the next time (each read is still checked against its digest), so a digest
is fitted once while the plan stands.

``acting``: the slots act without their value function (a worker's when the opponent's rows
go nowhere, :meth:`~rolloutfleet.sampling.multiagent.env_runner.MultiAgentEnvRunner.slots_act_only`),
so of each snapshot split so (the default MLP's) only the part acting needs is read, checked
against its own digest and fitted to the signature's acting names: about half the bytes.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rolloutfleet.data.weights_check import CheckedWeights, Signature, WeightsRefused, check_weights
from rolloutfleet.inference.default_mlp import acting_part
from rolloutfleet.league.reads import PendingRead
from rolloutfleet.league.records import MatchResult, Snapshot
from rolloutfleet.league.store import RESULTS_MAXLEN, PolicyStore
from rolloutfleet.spec.sections.league_spec import LeagueSpec
from rolloutfleet.transport.redis.errors import BackendError

log = logging.getLogger(__name__)

READ_AHEAD = 8
"""The most snapshots one read fetches: the one a game needs and the next picks'."""
DRAWS = 64
"""Picks drawn from the plan at a time."""


class LeagueOpponents:
    """Snapshots for one worker's episodes, from ``store`` as ``spec`` says. ``signature``:
    the slots' model (:meth:`~rolloutfleet.inference.policy.Policy.weights_signature`), which
    each snapshot read is fitted to (see the module doc)."""

    def __init__(
        self,
        store: PolicyStore,
        spec: LeagueSpec,
        *,
        seed: int,
        worker_index: int,
        clock: Callable[[], float] = time.monotonic,
        signature: Signature | None = None,
        acting: bool = False,
    ) -> None:
        self.store, self.spec, self.worker_index, self.clock = store, spec, worker_index, clock
        self.signature = signature
        self.acting = acting
        self._acting_signature: Signature = {} if signature is None else acting_part(signature)
        self.rng = np.random.default_rng(seed)
        self.names: tuple[str, ...] = ()
        self.probabilities: np.ndarray = np.zeros(0)
        self._cdf: np.ndarray = np.zeros(0)
        self._drawn: deque[int] = deque()  # indexes into names drawn from the plan, not yet picked
        self._ahead: deque[str] = deque()  # picks drawn, not yet given
        self._fetched: dict[str, Mapping[str, Any] | Exception] = {}  # read ahead for the picks in _ahead
        # name -> metadata of the plan's snapshots read so far: names are immutable while the
        # plan stands (a snapshot's name is free again only once retired, which changes the plan)
        self._known: dict[str, Snapshot] = {}
        self._fitted: set[str] = set()  # digests that passed check_weights, of the signature's dtypes
        self._last: str | None = None
        self.picks = 0
        self.reads = 0
        """Reads of snapshots that waited for Redis (a round trip for one or more snapshots, and
        one more for the metadata of those whose digest is not known yet)."""
        self.sent_ahead = 0
        """Requests for the next picks' snapshots sent without waiting (read at the next load)."""
        self._pending: PendingRead | None = None
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
        if self._last is not None:  # the last pick was held by a slot if it was not loaded
            self._fetched.pop(self._last, None)
        self.picks += 1
        self._last = self._ahead.popleft() if self._ahead else self._draw()
        return self._last

    def _draw(self) -> str:
        if not self._drawn:  # DRAWS at a time: the same stream of draws as one by one
            indexes = np.searchsorted(self._cdf, self.rng.random(DRAWS) * self._cdf[-1], side="right")
            self._drawn.extend(np.minimum(indexes, len(self.names) - 1).tolist())
        return self.names[self._drawn.popleft()]

    def _read_plan(self) -> None:
        try:
            plan = self.store.plan()
        except BackendError as exc:
            if not self._failing:
                log.warning("league plan %s not read (%s); playing the last one until it is", self.store.plan_key, exc)
            self._failing = True
            return
        self._failing = False
        names = tuple(sorted(plan))
        total = sum(plan.values())
        probabilities = np.array([plan[name] / total for name in names]) if total > 0 else np.zeros(0)
        if total <= 0:
            names = ()
        if names != self.names or not np.array_equal(probabilities, self.probabilities):
            self.names, self.probabilities = names, probabilities
            self._cdf = np.cumsum(probabilities)
            self._ahead.clear()  # drawn from the old plan
            self._drawn.clear()
            self._fetched.clear()
            self._pending = None  # its answer is dropped by the next request
            self._known.clear()
            self._fitted.clear()

    def load(self, name: str) -> Mapping[str, Any]:
        self.loads += 1
        self._last = None
        if self._pending is not None:  # asked for at the last load: mostly arrived by now
            due = {name, *self._ahead}  # not those picked since and played from a slot
            self._take({read: weights for read, weights in self._pending.receive().items() if read in due})
            self._pending = None
        loaded = self._fetched.pop(name, None)
        if loaded is None:
            loaded = self._read(name)
        self._send_ahead()
        if isinstance(loaded, Exception):
            raise loaded
        return loaded

    def _wanted(self) -> int:
        """How many picks ahead to read: as many as the share of picks loaded so far says."""
        share = self.loads / max(1, self.picks)
        wanted = max(1, round(READ_AHEAD * share)) - 1
        while len(self._ahead) < wanted and self.names:
            self._ahead.append(self._draw())
        return wanted

    def _read(self, name: str) -> Mapping[str, Any] | Exception:
        """``name`` with the next picks' snapshots, waiting for Redis."""
        batch = [name] + [other for other in list(self._ahead)[: self._wanted()] if other not in self._fetched]
        self.reads += 1
        self._take(self.store.load_many(batch, self._known, acting=self.acting))
        return self._fetched.pop(name)

    def _send_ahead(self) -> None:
        """Ask for the next picks' snapshots not yet read, not waiting for the answer (read
        at the next load): their weights, or first their metadata if this plan's digest of
        them is not known yet. Asked for once one of the next two picks' is not read (a pick
        a slot holds is not loaded, and only loads ask), or a name's metadata is missing:
        then every unread one of the read-ahead, so a request's fixed cost (its write,
        Redis's wake-up, the read of its answer) is shared by as many as the worker may
        hold. Its answer is read at the next load whatever its size (against asking as soon
        as three were unread: a third fewer requests at one slot a sub-env, tic-tac-toe 2 %
        faster on the 2-core machine, connect four the same within the noise)."""
        ahead = list(self._ahead)[: self._wanted()]
        names = [other for other in dict.fromkeys(ahead) if other not in self._fetched]
        due = any(pick not in self._fetched for pick in ahead[:2])
        if names and (due or any(name not in self._known for name in names)):
            self._pending = self.store.send_ahead(names, self._known, acting=self.acting)
            self.sent_ahead += self._pending is not None

    def _take(self, loaded: dict[str, Any]) -> None:
        """Snapshots read: fitted to the slots' signature (once per digest) and kept for their picks."""
        for read, weights in loaded.items():
            snap = self._known.get(read)
            if self.signature is None:
                self._fetched[read] = weights
            elif self.acting and snap is not None and snap.acting:  # its acting part only
                self._fetched[read] = self._fit(weights, snap.acting_digest, self._acting_signature)
            else:
                self._fetched[read] = self._fit(weights, None if snap is None else snap.digest, self.signature)

    def _fit(self, weights: Mapping[str, Any] | Exception, digest: str | None, signature: Signature) -> Any:
        """``weights`` fitted to the slots' ``signature`` (once per digest), or the error."""
        if isinstance(weights, Exception):
            return weights
        if digest is not None and digest in self._fitted:
            return CheckedWeights(weights, signature)
        try:
            arrays = check_weights(weights, signature)
        except WeightsRefused as exc:
            return exc
        if digest is not None and all(arrays[key] is weights[key] for key in arrays):  # nothing cast
            self._fitted.add(digest)
        return CheckedWeights(arrays, signature)

    def finished(self, seats: Mapping[str, str], returns: Mapping[str, float], eps_id: int | None = None) -> None:
        if len(seats) >= 2:
            self.pending.append(MatchResult(dict(seats), dict(returns), worker=self.worker_index, eps_id=eps_id))

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

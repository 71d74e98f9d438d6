"""A league's snapshots in a worker: a fixed number of policy *slots* (each a model like the
opponent policy's) holding the snapshots its episodes play, least recently used first out
(no I/O; the snapshots themselves come from an :class:`OpponentSource`).

Slots are built once with the runner, so a league never adds or drops a policy while it
samples: a snapshot that no slot holds is loaded into the least recently used slot that no
running episode plays. When every slot is in play, the episode gets the least recently used
snapshot a slot holds (counted as ``busy``), so memory stays at ``cachedPolicies`` models;
with at least as many slots as sub-envs (times opponent seats) that never happens and every
episode plays its own pick::

    >>> table = SlotTable(2)
    >>> table.assign("v1", busy=set()), table.assign("v2", busy=set()), table.assign("v1", busy=set())
    ((0, True), (1, True), (0, False))
    >>> table.assign("v3", busy={0})      # slot 1 (v2) is free and least recently used
    (1, True)
    >>> table.assign("v4", busy={0, 1})   # every slot in play: the LRU one's snapshot
    (0, False)
    >>> table.held, table.loads, table.busy
    (['v1', 'v3'], 3, 1)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rolloutfleet.sampling.multiagent.rows import SubEnv

log = logging.getLogger(__name__)


def slot_policy_id(opponent: str, slot: int) -> str:
    """The policy id of the opponent's slot ``slot`` (``#`` cannot be in a spec's policy ids)."""
    return f"{opponent}#{slot}"


class OpponentSource(Protocol):
    """Where a worker's league snapshots come from (the worker passes one to the runner)."""

    def pick(self) -> str | None:
        """The snapshot for the next episode's opponent seats; None: the opponent policy as it is."""
        ...

    def load(self, name: str) -> Mapping[str, Any]:
        """Snapshot ``name``'s weights (name -> array)."""
        ...

    def finished(self, seats: Mapping[str, str], returns: Mapping[str, float], eps_id: int | None = None) -> None:
        """An episode ended: each agent's policy or snapshot, its return, and the episode's id
        (its rows' ``eps_id``)."""
        ...


class SlotTable:
    """Which snapshot each of ``size`` slots holds, and when each was last used."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a league needs at least one slot, got {size}")
        self.slots: list[str | None] = [None] * size
        self._used = [0] * size
        self._clock = 0
        self.loads = 0
        """Snapshots loaded into a slot (each a read of its weights)."""
        self.busy = 0
        """Episodes that got another snapshot than picked: every slot was in play."""

    @property
    def assigned(self) -> int:
        """Episodes given a slot so far."""
        return self._clock

    @property
    def held(self) -> list[str]:
        return [name for name in self.slots if name is not None]

    def assign(self, name: str, busy: set[int]) -> tuple[int, bool]:
        """The slot an episode playing ``name`` uses, and whether ``name`` must be loaded
        into it first. ``busy``: the slots running episodes play."""
        self._clock += 1
        if name in self.slots:
            slot = self.slots.index(name)
            self._used[slot] = self._clock
            return slot, False
        free = [i for i in range(len(self.slots)) if i not in busy]
        if not free:
            slot = min(range(len(self.slots)), key=self._used.__getitem__)
            self.busy += 1
            self._used[slot] = self._clock
            return slot, False
        slot = min(free, key=lambda i: (self.slots[i] is not None, self._used[i]))
        self.slots[slot] = name
        self._used[slot] = self._clock
        self.loads += 1
        return slot, True

    def forget(self, slot: int) -> None:
        """Slot ``slot``'s load failed: it holds nothing."""
        self.slots[slot] = None


class LeagueSeats:
    """``spec.league`` in a multi-agent runner: the opponent's slots, which slot each
    episode plays (:meth:`start`: the runner acts for the opponent's seats of that game with
    the slot's weights, into the opponent's rows), and each finished game reported to the
    source (:meth:`finished`). Until a source is attached, the opponent plays as it is."""

    def __init__(self, opponent: str, cached_policies: int, num_envs: int) -> None:
        self.opponent = opponent
        self.table = SlotTable(cached_policies)
        self.source: OpponentSource | None = None
        self._slot_ids = [slot_policy_id(opponent, k) for k in range(cached_policies)]
        self.refused = 0
        """Snapshots that did not load (wrong model, gone): their games played the opponent as it is."""
        if cached_policies < num_envs:
            log.warning(
                "spec.league.cachedPolicies %d < spec.env.numEnvs %d: the games running at once share the "
                "snapshots the slots hold, and a new one is loaded only when a slot is free of games",
                cached_policies, num_envs,
            )  # fmt: skip

    def slot_ids(self) -> list[str]:
        return list(self._slot_ids)

    def start(self, env_index: int, subenvs: Sequence[SubEnv], set_weights: Callable[[str, Any], Any]) -> None:
        """A new game in ``subenvs[env_index]``: the slot holding the source's pick (loaded into
        the least recently used slot no other game plays if none holds it); none picked, or a
        snapshot that does not load (logged, counted), the opponent as it is."""
        sub = subenvs[env_index]
        name = None if self.source is None else self.source.pick()
        if self.source is None or name is None:
            return
        busy = {other.league_slot for j, other in enumerate(subenvs) if j != env_index}
        slot, load = self.table.assign(name, {b for b in busy if b is not None})
        if load:
            try:
                set_weights(slot_policy_id(self.opponent, slot), self.source.load(name))
            except Exception as exc:  # noqa: BLE001 - a snapshot that does not load: counted, the game goes on
                self.table.forget(slot)
                self.refused += 1
                log.warning(
                    "league snapshot %r did not load into %s (%s: %s); this game plays %s as it is",
                    name, slot_policy_id(self.opponent, slot), type(exc).__name__, exc, self.opponent,
                )  # fmt: skip
                return
        sub.league_slot, sub.league_name = slot, self.table.slots[slot]

    def finished(self, sub: SubEnv) -> None:
        """``sub``'s game ended: who played each seat (a slot by its snapshot's name) and the returns."""
        if self.source is None:
            return
        opponent, name = self.opponent, sub.league_name
        seats = {str(agent): name if policy_id == opponent and name else policy_id
                 for agent, policy_id in sub.mapping.items()}  # fmt: skip
        returns = {str(agent): float(sub.returns.get(agent, 0.0)) for agent in sub.mapping}
        self.source.finished(seats, returns, sub.eps_id)

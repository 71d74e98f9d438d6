"""A league's snapshots in a worker: a fixed number of policy *slots* (each a model like the
opponent policy's) holding the snapshots its episodes play, least recently used first out
(pure; the snapshots themselves come from an :class:`OpponentSource`).

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

from collections.abc import Mapping
from typing import Any, Protocol


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

    def finished(self, seats: Mapping[str, str], returns: Mapping[str, float]) -> None:
        """An episode ended: each agent's policy or snapshot, and its return."""
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

"""What a reconcile sees: the indexed pods, corrected by what this process remembers. Pure.

The watch lags behind the operator's own calls. Without this memory, the round that the
events of a delete trigger would delete the pod again, and the round that the events of
a create trigger would find the pod missing and post it again (answered 409: wasted
calls); and a pod that disappears without our delete (an eviction, a ``kubectl delete``)
could not be told from one we deleted. So this process remembers, per job, which pod it
saw last at each index, which pods it deleted, and which it created that the watch has
not shown yet; :func:`observe` turns that and the index into the inputs of
:func:`rolloutfleet_operator.plan.plan`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rolloutfleet_operator.pods import PodView

EXPECTATION_TTL_S = 60.0  # a created pod the watch never shows is created again after this


@dataclass
class PodMemory:
    """What this process saw of one job's pods and did to them, kept between reconciles."""

    known: dict[int, str] = field(default_factory=dict)  # index -> uid of the pod last seen
    deleted: set[str] = field(default_factory=set)  # uids this process deleted
    # index -> (uid, monotonic time) of pods this process created that the watch hasn't shown yet.
    expected: dict[int, tuple[str, float]] = field(default_factory=dict)

    def note_deleted(self, uid: str) -> None:
        self.deleted.add(uid)

    def note_created(self, index: int, uid: str, clock: float) -> None:
        # Not ``known`` yet: only a pod the watch has shown can be said to have vanished.
        self.expected[index] = (uid, clock)


@dataclass(frozen=True)
class Observation:
    pods: list[PodView]  # the indexed pods; those this process deleted count as going away
    vanished: list[int]  # indexes whose pod is gone without this process deleting it
    memory: PodMemory  # what to remember after this round

    def creatable(self, indexes: Iterable[int]) -> list[int]:
        """``indexes`` less those whose creation is still on its way to the watch."""
        return [index for index in indexes if index not in self.memory.expected]


def observe(
    memory: PodMemory, indexed: Iterable[PodView], clock: float, expectation_ttl_s: float = EXPECTATION_TTL_S
) -> Observation:
    """The pods to plan with, the vanished indexes, and the memory that follows.
    ``clock``: now, in :func:`time.monotonic` seconds (the clock of ``memory.expected``)."""
    # A pod this process deleted counts as going away until the watch says so.
    pods = [replace(p, deleting=True) if p.uid in memory.deleted and not p.deleting else p for p in indexed]
    present = {p.index: p.uid for p in pods}
    vanished = [i for i, uid in memory.known.items() if i not in present and uid not in memory.deleted]
    after = PodMemory(
        known=dict(present),
        deleted=memory.deleted & set(present.values()),  # gone from the watch: nothing left to mark
        expected={
            index: (uid, at)
            for index, (uid, at) in memory.expected.items()
            if index not in present and clock - at < expectation_ttl_s
        },
    )
    return Observation(pods=pods, vanished=vanished, memory=after)

"""What a reconcile sees: the indexed pods, corrected by what this process remembers. Pure.

The watch lags behind the operator's own calls. Without this memory, the round that the
events of a delete trigger would delete the pod again, and the round that the events of
a create trigger would find the pod missing and post it again (answered 409: wasted
calls); and a pod that disappears without our delete (an eviction, a ``kubectl delete``)
could not be told from one we deleted, nor told why it went. So this process remembers,
per job, the pod it saw last at each index (its last view: a DisruptionTarget condition
says why it went), the final views the watch's DELETED events brought, which pods it
deleted, and which it created that the watch has not shown yet; :func:`observe` turns
that and the index into the inputs of :func:`rolloutfleet_operator.loop.plan.plan`.

A creation is expected until the pod watch has gone past it (:class:`Expectation`): not for
a fixed time, so a watch that lags by minutes under a 10 000-pod start posts nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rolloutfleet_operator.children.pods import PodView

EXPECTATION_TTL_S = 60.0  # a creation of unknown resourceVersion (a 409) is expected this long
EXPECTATION_SETTLE_S = 5.0  # ... one the watch went past, this long (events of other pods may come first)
EXPECTATION_MAX_S = 900.0  # ... and none longer: a watch stuck for 15 minutes is no lag


def resource_version(value: object) -> int | None:
    """A resourceVersion as a number (the etcd revision the API server gives), None when it
    is not a decimal integer: such a creation is expected for :data:`EXPECTATION_TTL_S`."""
    text = str(value or "")
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class Expectation:
    """A pod this process created that the watch has not shown yet: ``version`` is the
    resourceVersion of the create's answer (None: unknown, as after a 409), ``created`` and
    ``passed_at`` (when the watch was first seen at or beyond ``version``) monotonic seconds.
    Once the watch is past it, the pod's own event is due: a short
    :data:`EXPECTATION_SETTLE_S` covers the events of other pods handled before it."""

    uid: str
    version: int | None
    created: float
    passed_at: float | None = None

    def follow(self, clock: float, watch_version: int | None) -> Expectation | None:
        """This expectation at ``clock``, the watch having reached ``watch_version`` (None: it
        brought nothing yet); None: expired, the pod may be created again."""
        if clock - self.created >= EXPECTATION_MAX_S:
            return None
        if self.version is None:
            return self if clock - self.created < EXPECTATION_TTL_S else None
        if self.passed_at is None:
            if watch_version is None or watch_version < self.version:
                return self  # the watch is behind: however long it takes, the pod is on its way
            return replace(self, passed_at=clock)
        return self if clock - self.passed_at < EXPECTATION_SETTLE_S else None


@dataclass
class PodMemory:
    """What this process saw of one job's pods and did to them, kept between reconciles."""

    known: dict[int, PodView] = field(default_factory=dict)  # index -> the pod last seen there
    gone: dict[str, PodView] = field(default_factory=dict)  # uid -> final view (a DELETED watch event)
    deleted: set[str] = field(default_factory=set)  # uids this process deleted
    # index -> the pod this process created there that the watch hasn't shown yet.
    expected: dict[int, Expectation] = field(default_factory=dict)

    def note_deleted(self, uid: str) -> None:
        self.deleted.add(uid)

    def note_gone(self, pod: PodView) -> None:
        """The watch says ``pod`` is deleted: its final view may say why (PodGC, for one,
        sets DisruptionTarget and deletes at once, faster than a reconcile comes round)."""
        self.gone[pod.uid] = pod

    def note_created(self, index: int, uid: str, clock: float, version: str | None = None) -> None:
        """``uid``: "" when the create found the pod there (409); ``version``: the
        resourceVersion of the create's answer."""
        # Not ``known`` yet: only a pod the watch has shown can be said to have vanished.
        self.expected[index] = Expectation(uid, resource_version(version), clock)


@dataclass(frozen=True)
class Observation:
    pods: list[PodView]  # the indexed pods; those this process deleted count as going away
    vanished: list[PodView]  # last views of pods gone without this process deleting them
    memory: PodMemory  # what to remember after this round

    def creatable(self, indexes: Iterable[int]) -> list[int]:
        """``indexes`` less those whose creation is still on its way to the watch."""
        return [index for index in indexes if index not in self.memory.expected]


def observe(
    memory: PodMemory, indexed: Iterable[PodView], clock: float, watch_version: int | None = None
) -> Observation:
    """The pods to plan with, the vanished pods, and the memory that follows.
    ``clock``: now, in :func:`time.monotonic` seconds (the clock of ``memory.expected``);
    ``watch_version``: the newest resourceVersion the pod watch has brought (None: unknown)."""
    # A pod this process deleted counts as going away until the watch says so.
    pods = [replace(p, deleting=True) if p.uid in memory.deleted and not p.deleting else p for p in indexed]
    present = {p.index: p for p in pods}
    uids = {p.uid for p in pods}
    vanished = [
        memory.gone.get(p.uid, p) for p in memory.known.values() if p.uid not in uids and p.uid not in memory.deleted
    ]
    after = PodMemory(
        known=present,
        gone={uid: p for uid, p in memory.gone.items() if uid in uids},  # a DELETED event ahead of the index
        deleted=memory.deleted & uids,  # gone from the watch: nothing left to mark
        expected={
            index: followed
            for index, expectation in memory.expected.items()
            if _on_its_way(present.get(index), expectation.uid)
            and (followed := expectation.follow(clock, watch_version)) is not None
        },
    )
    return Observation(pods=pods, vanished=vanished, memory=after)


def _on_its_way(shown: PodView | None, uid: str) -> bool:
    """Whether a pod created at an index (``uid``; "" when the create found it there) is still
    to be shown: the watch shows no pod there, or only its predecessor going away (a spec
    change's roll: a replacement posted while the lagging watch still had the old pod would
    otherwise be posted again, answered 409, once the old one left the index)."""
    return shown is None or (shown.deleting and shown.uid != uid)

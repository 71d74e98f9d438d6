"""The observe step: indexed pods corrected by what this process did, vanished pods,
and creations still on their way to the watch."""

from __future__ import annotations

from typing import Any

from rolloutfleet_operator.children.pods import PodView
from rolloutfleet_operator.loop.observe import (
    EXPECTATION_MAX_S,
    EXPECTATION_SETTLE_S,
    EXPECTATION_TTL_S,
    Expectation,
    PodMemory,
    observe,
    resource_version,
)


def pod(index: int, uid: str | None = None, **kw: Any) -> PodView:
    return PodView(
        name=f"j-worker-{index}", uid=uid or f"uid-{index}", index=index, template_hash="h", phase="Running", **kw
    )


def test_a_first_look_remembers_the_pods_it_saw_and_finds_nothing_vanished() -> None:
    seen = observe(PodMemory(), [pod(0), pod(1)], clock=0.0)
    assert seen.pods == [pod(0), pod(1)] and seen.vanished == []
    assert seen.memory.known == {0: pod(0), 1: pod(1)}


def test_a_pod_gone_without_our_delete_has_vanished_with_its_last_view() -> None:
    evicted = pod(2, disruption="EvictionByEvictionAPI", deleting=True)
    memory = PodMemory(known={0: pod(0), 1: pod(1), 2: evicted})
    seen = observe(memory, [pod(0)], clock=0.0)
    assert seen.vanished == [pod(1), evicted] and seen.memory.known == {0: pod(0)}


def test_the_final_view_of_a_deleted_event_says_why_a_pod_vanished() -> None:
    # PodGC marks the pod and deletes it at once: the index never showed the condition.
    final = pod(1, disruption="DeletionByPodGC", deleting=True)
    memory = PodMemory(known={0: pod(0), 1: pod(1)})
    memory.note_gone(final)
    seen = observe(memory, [pod(0)], clock=0.0)
    assert seen.vanished == [final] and seen.memory.gone == {}
    # A DELETED event seen before the index dropped the pod waits for it; a stale one is dropped.
    early = PodMemory(known={0: pod(0)}, gone={"uid-0": pod(0, deleting=True), "old": pod(5, uid="old")})
    assert observe(early, [pod(0)], clock=0.0).memory.gone == {"uid-0": pod(0, deleting=True)}


def test_a_pod_we_deleted_goes_away_and_does_not_vanish() -> None:
    memory = PodMemory(known={0: pod(0), 1: pod(1)}, deleted={"uid-0", "uid-1"})
    # The watch still shows pod 0 as it was before our delete: it counts as going away.
    seen = observe(memory, [pod(0)], clock=0.0)
    assert seen.pods == [pod(0, deleting=True)] and seen.vanished == []
    assert seen.memory.deleted == {"uid-0"}  # pod 1 is gone from the watch: nothing left to mark


def test_a_pod_replaced_under_the_same_index_is_not_marked_by_its_predecessor() -> None:
    memory = PodMemory(known={0: pod(0, uid="old")}, deleted={"old"})
    seen = observe(memory, [pod(0, uid="new")], clock=0.0)
    assert seen.pods == [pod(0, uid="new")] and seen.vanished == [] and seen.memory.deleted == set()


def test_a_creation_of_unknown_version_is_expected_until_the_watch_shows_it_or_it_expires() -> None:
    memory = PodMemory()
    memory.note_created(1, "uid-1", clock=100.0)
    memory.note_created(2, "uid-2", clock=100.0)
    memory.note_created(2, "uid-2", clock=100.0)
    assert memory.known == {}  # only a pod the watch showed can vanish
    seen = observe(memory, [pod(1)], clock=101.0)
    assert seen.memory.expected == {2: Expectation("uid-2", None, 100.0)} and seen.vanished == []
    assert seen.creatable([0, 2, 3]) == [0, 3]  # pod 2 is on its way: not posted again
    later = observe(seen.memory, [pod(1)], clock=100.0 + EXPECTATION_TTL_S)
    assert later.memory.expected == {} and later.creatable([2]) == [2]  # never showed up: create it again


def test_a_creation_is_expected_as_long_as_the_watch_is_behind_it() -> None:
    memory = PodMemory()
    memory.note_created(4, "uid-4", clock=0.0, version="5000")
    # The watch lags (a 10 000-pod start): minutes pass, it has brought events up to 4 999 only.
    behind = observe(memory, [], clock=10 * EXPECTATION_TTL_S, watch_version=4999)
    assert behind.creatable([4]) == []  # not posted again (it would be answered 409)
    # The watch reaches the create's version: the pod's own event is due; a short settle, then
    # a pod it never showed (created and deleted meanwhile) is created again.
    reached = observe(behind.memory, [], clock=700.0, watch_version=5000)
    assert reached.creatable([4]) == []
    assert observe(reached.memory, [], clock=700.0 + EXPECTATION_SETTLE_S, watch_version=5003).creatable([4]) == [4]
    # Shown by the watch: no longer expected, whatever the versions say.
    assert observe(behind.memory, [pod(4)], clock=1.0, watch_version=4999).memory.expected == {}


def test_no_creation_is_expected_for_ever() -> None:
    expectation = Expectation("uid", 10, created=0.0)
    assert expectation.follow(EXPECTATION_MAX_S - 1, watch_version=None) == expectation  # no event yet: waits
    assert expectation.follow(EXPECTATION_MAX_S, watch_version=9) is None  # a watch stuck that long: no lag


def test_resource_versions_are_numbers_or_unknown() -> None:
    assert resource_version("123") == 123
    assert resource_version("") is None and resource_version(None) is None and resource_version("a1") is None


def test_observing_leaves_the_memory_it_was_given_as_it_was() -> None:
    memory = PodMemory(known={0: pod(0)}, deleted={"uid-0", "gone"}, expected={3: Expectation("uid-3", 7, 0.0)})
    observe(memory, [pod(3)], clock=1.0, watch_version=9)
    assert memory == PodMemory(known={0: pod(0)}, deleted={"uid-0", "gone"}, expected={3: Expectation("uid-3", 7, 0.0)})


def test_a_replacement_is_expected_while_the_watch_still_shows_its_predecessor_going() -> None:
    # A roll: the old pod at index 0 was deleted and its replacement created; the watch lags.
    memory = PodMemory(known={0: pod(0, uid="old")}, deleted={"old"})
    memory.note_created(0, "new", clock=10.0)
    seen = observe(memory, [pod(0, uid="old")], clock=11.0)
    assert seen.memory.expected == {0: Expectation("new", None, 10.0)}
    # The old pod leaves the index before the new one enters it: nothing to create again.
    gone = observe(seen.memory, [], clock=12.0)
    assert gone.creatable([0]) == []
    shown = observe(gone.memory, [pod(0, uid="new")], clock=13.0)
    assert shown.memory.expected == {}

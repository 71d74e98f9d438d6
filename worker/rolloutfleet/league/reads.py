"""Reading snapshots' weights from the store's blobs: the commands, and the check of each
answer against its digest before it is decoded (never unpickled).

A read asks for whole blobs in one ``MGET``; or, ``acting``, for those split so (the default
MLP's: what acting needs first, its length and SHA-256 in the metadata) only that first part,
one ``GETRANGE`` each. :class:`BlobReads` builds the commands and checks their answers,
:class:`PendingRead` is a request sent ahead (:meth:`~.store.PolicyStore.send_ahead`) whose
answer is read later. Pure of I/O apart from :class:`PendingRead`'s read of the answer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from rolloutfleet.data.codec import decode_tensors
from rolloutfleet.league.records import Snapshot
from rolloutfleet.transport.redis.early import EarlyRequests

Loaded = dict[str, np.ndarray] | Exception
"""A snapshot's weights (name -> array) or why they could not be read."""


def take_metadata(
    snapshots_key: str, names: list[str], items: list[Any], known: dict[str, Snapshot]
) -> dict[str, Loaded]:
    """HMGET's answer ``items`` for ``names`` (fields of ``snapshots_key``) into ``known``;
    the names that are not in the league, each with its ``KeyError``."""
    missing: dict[str, Loaded] = {}
    for name, item in zip(names, items, strict=True):
        if item is None:
            missing[name] = KeyError(f"no snapshot {name!r} in the league {snapshots_key}")
        else:
            known[name] = Snapshot.from_json(item)
    return missing


def verified(prefix: str, name: str, snap: Snapshot, payload: Any, known: dict[str, Snapshot], acting: bool) -> Loaded:
    """Snapshot ``name``'s weights from ``payload`` (the answer for its blob ``prefix +
    digest``: all of it, or ``acting``, its acting part), checked against their digest; or the
    error (its metadata forgotten from ``known`` when the blob is gone)."""
    if not isinstance(payload, bytes) or (acting and not payload):  # GETRANGE of no key: b""
        known.pop(name, None)  # read its metadata again next time
        return KeyError(f"snapshot {name!r}: its weights {prefix}{snap.digest} are gone")
    digest = snap.acting_digest if acting else snap.digest
    if hashlib.sha256(payload).hexdigest() != digest:
        part = "the acting part of its weights does" if acting else "its weights do"
        return ValueError(f"snapshot {name!r}: {part} not match their digest {digest}")
    data = bytearray(payload)
    if acting or not snap.acting:
        return decode_tensors(data)
    view = memoryview(data)
    return decode_tensors(view[: snap.acting]) | decode_tensors(view[snap.acting :])


class BlobReads:
    """The commands that read the weights of the ``wanted`` snapshots (blobs under
    ``prefix``), and the check of their answers (:func:`verified`)."""

    def __init__(self, prefix: str, wanted: Mapping[str, Snapshot], acting: bool) -> None:
        self.prefix, self.wanted = prefix, wanted
        self.parts = [name for name, snap in wanted.items() if acting and snap.acting]
        self.whole = [name for name, snap in wanted.items() if not (acting and snap.acting)]
        # One hash tag for every blob: one node of a cluster answers them all.
        whole = [("MGET", *(prefix + wanted[name].digest for name in self.whole))] if self.whole else []
        parts = [("GETRANGE", prefix + wanted[name].digest, 0, wanted[name].acting - 1) for name in self.parts]
        self.commands: list[tuple[Any, ...]] = whole + parts

    def verified(self, answers: list[Any], known: dict[str, Snapshot]) -> dict[str, Loaded]:
        """The weights in ``answers`` (those of :attr:`commands`, in order), by name."""
        payloads = dict(zip(self.whole, answers[0], strict=True)) if self.whole else {}
        payloads.update(zip(self.parts, answers[1 if self.whole else 0 :], strict=True))
        parts = set(self.parts)
        return {
            name: verified(self.prefix, name, snap, payloads[name], known, name in parts)
            for name, snap in self.wanted.items()
        }


class PendingRead:
    """Snapshots asked for on ``early`` (request number ``request``), not yet read back: the
    metadata of the ``unknown`` names (fields of the hash ``snapshots_key``), and ``reads``."""

    def __init__(
        self,
        early: EarlyRequests,
        request: int,
        snapshots_key: str,
        unknown: list[str],
        reads: BlobReads,
        known: dict[str, Snapshot],
    ) -> None:
        self.early, self.request, self.snapshots_key = early, request, snapshots_key
        self.unknown, self.reads, self.known = unknown, reads, known

    def receive(self) -> dict[str, Loaded]:
        """The weights asked for, each checked against its digest (or the error), by name.
        The metadata asked for goes into ``known`` (a snapshot that is gone maps to
        ``KeyError``). Empty if the answer was lost (a failed connection, or a later
        request): read those snapshots when due."""
        answers = self.early.receive(self.request)
        if answers is None:
            return {}
        loaded = take_metadata(self.snapshots_key, self.unknown, answers.pop(0) if self.unknown else [], self.known)
        loaded.update(self.reads.verified(answers, self.known))
        return loaded

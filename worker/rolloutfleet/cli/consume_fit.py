"""Which batches ``rolloutfleet consume`` saves in its one file: those that fit the job's columns.

As a learner's :class:`~rolloutfleet.transport.consumer.BatchConsumer` does, the reference is
the columns the workers declare (:mod:`rolloutfleet.transport.declared_columns`), not the
first batch read. With nothing declared (a producer that is not a worker):

* a look (:class:`LookFit`, no ``--group``, nothing acknowledged) saves the batches of the
  schema most batches read have, re-judged as it reads: a lone odd first batch sets no
  precedent;
* ``--group`` (:class:`SpoolFit`) acknowledges each batch once on disk, so the first batch it
  saves fixes the file's columns; the unfit are left pending for the group's learner.

Either way, once a batch is saved, a batch unlike it is not (a rollout that changes the
declaration mid-read leaves the newer batches to the next read).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rolloutfleet.transport.declared_columns import SchemaReference
from rolloutfleet.transport.entries import Message, Schema, schema_difference, schema_of

Declared = Callable[[], Schema | None]
"""Reads the job's declared columns (None: none declared)."""


class LookFit:
    """The batches of a look that fit, judged again as more are read.

    >>> import numpy as np
    >>> fit = LookFit(lambda: None)
    >>> odd, good = {"obs": np.zeros((1, 5), np.float32)}, {"obs": np.zeros((1, 4), np.float32)}
    >>> fit.add([Message("1-0", odd, None, None), Message("2-0", good, None, None),
    ...          Message("3-0", good, None, None)])
    >>> [m.id for m in fit.fit()], fit.against()
    (['2-0', '3-0'], 'most batches read')
    """

    def __init__(self, declared: Declared) -> None:
        self._reference = SchemaReference(declared, window=sys.maxsize)  # every batch of the look counts
        self._read: list[Message] = []
        self._reasons: list[str | None] = []

    def add(self, messages: Sequence[Message]) -> None:
        """Batches just read, in order; all read so far are judged again."""
        self._reference.saw([schema_of(m.batch) for m in messages])
        self._read += messages
        self._reasons = self._reference.judge([schema_of(m.batch) for m in self._read])

    def fit(self) -> list[Message]:
        return [m for m, reason in zip(self._read, self._reasons, strict=True) if reason is None]

    def unfit(self) -> list[str]:
        """``<entry id> (<why>)`` of each batch left out."""
        return [f"{m.id} ({reason})" for m, reason in zip(self._read, self._reasons, strict=True) if reason is not None]

    def against(self) -> str:
        """What the batches were judged against, in words."""
        return "the declared columns" if self._reference.declared() is not None else "most batches read"


class SpoolFit:
    """Batch by batch (each saved and acknowledged before the next): the declaration, and once
    a batch is saved, that batch's columns.

    >>> import numpy as np
    >>> fit = SpoolFit(lambda: (("obs", "float32", (4,)),))
    >>> fit.reason({"obs": np.zeros((1, 5), np.float32)})
    "column 'obs' has rows of shape (5,), the batch's have (4,)"
    >>> fit.reason({"obs": np.zeros((1, 4), np.float32)}) is None, fit.against()
    (True, 'the declared columns')
    """

    def __init__(self, declared: Declared) -> None:
        self._reference = SchemaReference(declared)
        self._saved: Schema | None = None

    def reason(self, batch: Mapping[str, np.ndarray]) -> str | None:
        """Why ``batch`` cannot be saved with the others (one line), or None: then it counts as saved."""
        schema = schema_of(batch)
        if self._saved is not None:
            return schema_difference(schema, self._saved)
        reason = self._reference.judge([schema])[0]
        if reason is None:
            self._saved = schema
        return reason

    def against(self) -> str:
        return "the declared columns" if self._reference.declared() is not None else "the first batch saved"

"""The columns a job's workers declare for their batches, and what a learner judges against.

Each worker, before its first batch of a stream (a policy's, for a multi-agent job), writes
the hash :attr:`~rolloutfleet.transport.redis.keys.JobKeys.columns`: column name -> JSON
``{"dtype": ..., "shape": [...]}`` (the dtype of text columns is ``"U"``; the shape is a row's),
as a learner will decode them. Workers of one spec declare the same thing; during a rollout
the newest worker's declaration wins (it replaces the whole hash at once). A
:class:`~rolloutfleet.transport.consumer.BatchConsumer` reads it and dead-letters the batches
that do not fit it, whatever it happened to read first. A producer that is not a worker
(a test, a script with a :class:`~rolloutfleet.transport.publisher.BatchPublisher`) declares nothing.

    >>> fields = schema_fields((("obs", "float32", (4,)), ("agent_id", "U", ())))
    >>> fields
    {'obs': '{"dtype": "float32", "shape": [4]}', 'agent_id': '{"dtype": "U", "shape": []}'}
    >>> parse_schema({k.encode(): v.encode() for k, v in fields.items()})
    (('agent_id', 'U', ()), ('obs', 'float32', (4,)))
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from rolloutfleet.data.batch import AGENT_ID, AGENT_INDEX
from rolloutfleet.transport.entries import Schema, schema_difference, schema_of
from rolloutfleet.transport.redis.errors import Client
from rolloutfleet.transport.redis.keys import JobKeys

REFRESH_S = 2.0
"""How long a consumer trusts the declaration it read (a mismatch reads it again at once)."""


def published_schema(batch: Mapping[str, np.ndarray], agent_ids: Sequence[str] | None, policy: str | None) -> Schema:
    """The schema a learner sees for ``batch`` once published (a policy's stream adds the
    text ``agent_id`` beside ``agent_index``, as :func:`~rolloutfleet.transport.entries.decode_entry` does)."""
    if policy is not None and agent_ids and AGENT_INDEX in batch:
        return schema_of({**batch, AGENT_ID: np.asarray(list(agent_ids))})
    return schema_of(batch)


def schema_fields(schema: Schema) -> dict[str, str]:
    """The hash's fields for ``schema``."""
    return {name: json.dumps({"dtype": dtype, "shape": list(shape)}) for name, dtype, shape in schema}


def parse_schema(raw: Mapping[bytes | str, bytes | str]) -> Schema | None:
    """The schema in the hash as Redis returns it; None when empty or not one (a foreign or
    damaged hash judges nothing)."""
    columns = []
    try:
        for name, value in raw.items():
            field = json.loads(value)
            shape = tuple(int(n) for n in field["shape"])
            columns.append((name.decode() if isinstance(name, bytes) else str(name), str(field["dtype"]), shape))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return tuple(sorted(columns)) or None


def declare(client: Client, keys: JobKeys, schema: Schema) -> None:
    """Replace the declaration of ``keys``'s stream with ``schema`` (one MULTI: a reader never
    sees two declarations mixed)."""
    pipe = client.pipeline(transaction=True)
    pipe.delete(keys.columns)
    pipe.hset(keys.columns, mapping=schema_fields(schema))  # type: ignore[arg-type]
    pipe.execute()


def read_declared(client: Client, keys: JobKeys) -> Schema | None:
    """The declared schema of ``keys``'s stream, or None when no worker declared one."""
    return parse_schema(client.hgetall(keys.columns))  # type: ignore[arg-type]


class SchemaReference:
    """What a consumer judges batches against (pure but for ``read``, the declaration's reader).

    The declared columns when the workers declared some, re-read at most every ``refresh_s``
    and at once when a batch does not fit them (a rollout may have changed them); with none
    declared, the schema most of the last ``window`` batches read have, ties to the newest:
    a first odd batch read alone sets no precedent once good batches follow.

    >>> ref = SchemaReference(lambda: None, clock=lambda: 0.0)
    >>> ref.saw([(("obs", "float32", (5,)),)])
    >>> ref.saw([(("obs", "float32", (4,)),)])
    >>> ref.current()
    (('obs', 'float32', (4,)),)
    """

    def __init__(
        self,
        read: Callable[[], Schema | None],
        clock: Callable[[], float] = time.monotonic,
        refresh_s: float = REFRESH_S,
        window: int = 64,
    ) -> None:
        self._read = read
        self._clock = clock
        self._refresh_s = refresh_s
        self._declared: Schema | None = None
        self._read_at = -math.inf
        self._recent: deque[Schema] = deque(maxlen=window)

    def saw(self, schemas: Sequence[Schema]) -> None:
        """Count the schemas of batches just read (each batch once)."""
        self._recent.extend(schemas)

    def declared(self, refresh: bool = False) -> Schema | None:
        now = self._clock()
        if refresh or now - self._read_at >= self._refresh_s:
            self._declared, self._read_at = self._read(), now
        return self._declared

    def current(self) -> Schema | None:
        """The reference now: the declaration, else the recent majority (None: nothing read)."""
        declared = self.declared()
        if declared is not None or not self._recent:
            return declared
        counts = Counter(self._recent)
        best = max(counts.values())
        return next(schema for schema in reversed(self._recent) if counts[schema] == best)

    def judge(self, schemas: Sequence[Schema]) -> list[str | None]:
        """Why each schema cannot join the batch (one line), or None where it can."""
        reference = self.current()
        reasons = _mismatches(schemas, reference)
        if any(reasons) and self._declared is not None and self._read_at < self._clock():
            reference = self.declared(refresh=True) or self.current()
            reasons = _mismatches(schemas, reference)
        return reasons


def _mismatches(schemas: Sequence[Schema], reference: Schema | None) -> list[str | None]:
    if reference is None:
        return [None] * len(schemas)
    return [schema_difference(schema, reference) for schema in schemas]

"""One stream entry as a learner sees it: the publisher's :class:`BatchMetadata`, the
decoded batch (:func:`decode_entry`), the rows recent enough for a policy-lag bound
(:func:`fresh_rows`), whether it can join other entries' rows (:func:`schema_mismatch`)
and many entries' rows in one batch (:func:`concat_messages`)."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rolloutfleet.data.batch import AGENT_ID, AGENT_INDEX, WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.data.codec import DecodeError, decode, decode_multi
from rolloutfleet.transport.batch_entry import MAX_COUNT


class _Acker(Protocol):
    def ack(self, messages: Sequence[Message]) -> None: ...


@dataclass(frozen=True)
class BatchMetadata:
    """What the publisher wrote beside the payload."""

    worker_index: int
    weights_seq_no: int
    """The newest weights version among the batch's rows (its ``weights_seq_no`` column)."""
    env_steps: int
    created_at: float
    producer: str = ""
    seq: int = -1
    policy: str | None = None
    """The policy of a multi-agent job whose batch this is (None: single-agent)."""
    agent_ids: tuple[str, ...] = ()
    """Multi-agent: agent id of each ``agent_index`` in the batch."""
    weights_seq_no_min: int | None = None
    """The oldest weights version among the batch's rows (None: ``weights_seq_no``)."""

    def __post_init__(self) -> None:
        if self.weights_seq_no_min is None:
            # Entries of publishers older than the field: they wrote one version per batch.
            object.__setattr__(self, "weights_seq_no_min", self.weights_seq_no)

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> BatchMetadata:
        def number(name: bytes, kind: Callable[[str], Any]) -> Any:
            raw = fields.get(name)
            if raw is None:
                raise DecodeError(f"entry has no {name.decode()!r} field")
            try:
                return kind(raw.decode())
            except (ValueError, UnicodeDecodeError):
                raise DecodeError(f"field {name.decode()!r} is not a number: {raw[:40]!r}") from None

        def count(name: bytes) -> int:
            # A weights version is a Redis INCR (a signed 64-bit integer); an index or a count
            # below 0 or past that is no publisher's: judged here, not met in a learner's code.
            value = int(number(name, int))
            if not 0 <= value <= MAX_COUNT:
                raise DecodeError(f"field {name.decode()!r} must be within 0 and 2**63 - 1, got {value}")
            return value

        def unix_time(name: bytes) -> float:
            value = float(number(name, float))
            if not math.isfinite(value):
                raise DecodeError(f"field {name.decode()!r} must be a finite unix time, got {value}")
            return value

        metadata = cls(
            worker_index=count(b"worker_index"),
            weights_seq_no=count(b"weights_seq_no"),
            env_steps=count(b"env_steps"),
            created_at=unix_time(b"created_at"),
            producer=fields.get(b"producer", b"").decode("utf-8", "replace"),
            seq=int(fields[b"seq"]) if fields.get(b"seq", b"").isdigit() else -1,
            policy=fields[b"policy"].decode("utf-8", "replace") if b"policy" in fields else None,
            agent_ids=_agent_ids(fields.get(b"agent_ids")),
            weights_seq_no_min=count(b"weights_seq_no_min") if b"weights_seq_no_min" in fields else None,
        )
        if metadata.weights_seq_no_min is not None and metadata.weights_seq_no_min > metadata.weights_seq_no:
            raise DecodeError(
                f"field 'weights_seq_no_min' ({metadata.weights_seq_no_min}) is above "
                f"'weights_seq_no' ({metadata.weights_seq_no}): the oldest version of the rows cannot be the newer"
            )
        return metadata


def _agent_ids(raw: bytes | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    try:
        ids = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise DecodeError(f"field 'agent_ids' is not JSON: {raw[:40]!r}") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DecodeError("field 'agent_ids' must be a JSON list of strings")
    return tuple(ids)


class Message:
    """One stream entry: ``batch`` (read-only zero-copy views), ``metadata``, ``ack()``."""

    __slots__ = ("_consumer", "acked", "batch", "id", "metadata", "shard")

    def __init__(
        self, entry_id: str, batch: SampleBatch, metadata: BatchMetadata, consumer: _Acker | None, shard: int = 0
    ) -> None:
        self.id = entry_id
        self.shard = shard
        """The batch stream (shard of the job, ``spec.redis.shards``) the entry is in."""
        self.batch = batch
        self.metadata = metadata
        self.acked = consumer is None  # read without a group: there is nothing to acknowledge
        self._consumer = consumer

    def ack(self) -> None:
        """Tell the group this entry is done; it will not be delivered again."""
        if self._consumer is not None:
            self._consumer.ack([self])

    def split(self, rows: int) -> tuple[Message, Message]:
        """Its first ``rows`` rows and the rest, as two views of the one entry: the head is not
        acknowledged on its own (its ``ack()`` does nothing); the tail acknowledges the entry."""
        head = Message(self.id, self.batch.rows(slice(0, rows)), self.metadata, None, self.shard)
        tail = Message(self.id, self.batch.rows(slice(rows, None)), self.metadata, self._consumer, self.shard)
        tail.acked = self.acked
        return head, tail

    def __repr__(self) -> str:
        return f"Message({self.id}, {len(self.batch)} rows, {self.metadata})"


def take_rows(messages: Sequence[Message], rows: int) -> tuple[list[Message], list[Message]]:
    """The messages that hold the first ``rows`` rows, and the rest; a message across the cut is
    split (:meth:`Message.split`): its head goes with the first, its tail with the rest.

    >>> from rolloutfleet.data.batch import SampleBatch
    >>> meta = BatchMetadata(worker_index=0, weights_seq_no=0, env_steps=4, created_at=0.0)
    >>> four = [Message(f"1-{i}", SampleBatch({"t": np.arange(4)}), meta, None) for i in range(2)]
    >>> taken, rest = take_rows(four, 6)
    >>> [(m.id, m.batch["t"].tolist()) for m in taken], [(m.id, m.batch["t"].tolist()) for m in rest]
    ([('1-0', [0, 1, 2, 3]), ('1-1', [0, 1])], [('1-1', [2, 3])])
    """
    taken: list[Message] = []
    total = 0
    for position, message in enumerate(messages):
        size = len(message.batch)
        if total + size <= rows:
            taken.append(message)
            total += size
            continue
        if total == rows:
            return taken, list(messages[position:])
        head, tail = message.split(rows - total)
        return [*taken, head], [tail, *messages[position + 1 :]]
    return taken, []


def decode_entry(fields: Mapping[bytes, bytes], policy: str | None = None) -> tuple[SampleBatch, BatchMetadata]:
    """The batch and metadata of one stream entry (of ``policy``'s stream of a multi-agent
    job); raises :class:`DecodeError` saying what is wrong with it."""
    metadata = BatchMetadata.from_fields(fields)
    payload = fields.get(b"payload")
    if payload is None:
        raise DecodeError("entry has no 'payload' field")
    if policy is None:
        return decode(payload), metadata
    groups = decode_multi(payload)
    batch = groups.get(policy)
    if len(groups) != 1 or batch is None:
        raise DecodeError(f"payload holds policies {sorted(groups)}, expected exactly {policy!r}")
    if AGENT_INDEX not in batch or not metadata.agent_ids:
        return batch, metadata
    index = batch[AGENT_INDEX]
    if len(index) and (int(index.min()) < 0 or int(index.max()) >= len(metadata.agent_ids)):
        raise DecodeError(f"agent_index out of range of the entry's {len(metadata.agent_ids)} agent_ids")
    return SampleBatch({**batch, AGENT_ID: np.asarray(metadata.agent_ids)[index]}), metadata


def fresh_rows(batch: SampleBatch, metadata: BatchMetadata, oldest_allowed: int) -> tuple[SampleBatch, int]:
    """The rows of ``batch`` sampled with weights version ``oldest_allowed`` or newer, and
    how many rows were dropped.

    Judged row by row from the ``weights_seq_no`` column: rows carried over from an earlier
    fragment can be older than the rest, so neither end of the batch speaks for all of it.
    A batch without the column (built by hand) has one version, its metadata's. Returns
    ``batch`` itself when every row is recent enough (the common case: one pass, no copy).
    """
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is None:
        if metadata.weights_seq_no >= oldest_allowed:
            return batch, 0
        return batch.rows(slice(0, 0)), len(batch)
    check_versions(batch)
    if not len(column) or int(column.min()) >= oldest_allowed:
        return batch, 0
    fresh = column >= oldest_allowed
    return batch.rows(fresh), len(batch) - int(np.count_nonzero(fresh))


def check_versions(batch: SampleBatch) -> None:
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is not None and (column.ndim != 1 or column.dtype.kind not in "iu"):
        raise DecodeError(
            f"column {WEIGHTS_SEQ_NO!r} must be one integer per row, got {column.dtype} of shape {column.shape}"
        )


Schema = tuple[tuple[str, str, tuple[int, ...]], ...]
"""Per column, sorted by name: (name, dtype, shape of one row); text columns' width is left out."""


def schema_of(batch: Mapping[str, np.ndarray]) -> Schema:
    """What a batch must share with others to be concatenated with them.

    >>> schema_of({"obs": np.zeros((5, 4), np.float32), "agent_id": np.array(["a", "bb"])})
    (('agent_id', 'U', ()), ('obs', 'float32', (4,)))
    """
    return tuple(
        sorted(
            (str(name), "U" if column.dtype.kind == "U" else str(column.dtype), tuple(column.shape[1:]))
            for name, column in batch.items()
        )
    )


def majority_schema(messages: Sequence[Message]) -> Schema:
    """The schema most of ``messages`` have (the earliest of those tied)."""
    counts = Counter(schema_of(m.batch) for m in messages)
    best = max(counts.values())
    return next(schema for m in messages if counts[schema := schema_of(m.batch)] == best)


def schema_mismatch(batch: Mapping[str, np.ndarray], reference: Schema) -> str | None:
    """Why ``batch`` cannot be concatenated with batches of ``reference`` (one line), or None.

    >>> schema_mismatch({"obs": np.zeros((2, 3), np.float32)}, (("obs", "float32", (4,)),))
    "column 'obs' has rows of shape (3,), the batch's have (4,)"
    """
    return schema_difference(schema_of(batch), reference)


def schema_difference(schema: Schema, reference: Schema) -> str | None:
    """Why batches of ``schema`` cannot join batches of ``reference`` (one line), or None."""
    mine = {name: (dtype, shape) for name, dtype, shape in schema}
    theirs = {name: (dtype, shape) for name, dtype, shape in reference}
    if set(mine) != set(theirs):
        missing, extra = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
        parts = ([f"missing {missing}"] if missing else []) + ([f"extra {extra}"] if extra else [])
        return f"columns {sorted(mine)} are not the batch's {sorted(theirs)} ({', '.join(parts)})"
    for name in sorted(mine):
        (dtype, shape), (want_dtype, want_shape) = mine[name], theirs[name]
        if dtype != want_dtype:
            return f"column {name!r} is {dtype}, the batch's is {want_dtype}"
        if shape != want_shape:
            return f"column {name!r} has rows of shape {shape}, the batch's have {want_shape}"
    return None


def concat_messages(
    messages: Sequence[Message], extra: Mapping[str, Callable[[BatchMetadata], int]] | None = None
) -> dict[str, np.ndarray]:
    """Columns of all ``messages`` row-wise in one writable copy, plus per-row columns
    made from the metadata (``weights_seq_no`` unless the batches carry it, and ``extra``)."""
    if not messages:
        return {}
    names = list(messages[0].batch)
    for message in messages[1:]:
        if list(message.batch) != names and set(message.batch) != set(names):
            raise ValueError(f"entry {message.id} has columns {sorted(message.batch)}, expected {sorted(names)}")
    per_row: dict[str, Callable[[BatchMetadata], int]] = dict(extra or {})
    if WEIGHTS_SEQ_NO not in names:
        per_row.setdefault(WEIGHTS_SEQ_NO, lambda meta: meta.weights_seq_no)
    total = sum(len(m.batch) for m in messages)
    out: dict[str, np.ndarray] = {}
    for name in names:
        first = messages[0].batch[name]
        # Text columns (agent ids) differ in width from entry to entry: take the widest.
        dtype = np.result_type(*(m.batch[name] for m in messages)) if first.dtype.kind == "U" else first.dtype
        column = np.empty((total, *first.shape[1:]), dtype)
        start = 0
        for message in messages:
            part = message.batch[name]
            column[start : start + len(part)] = part
            start += len(part)
        out[name] = column
    for name, value_of in per_row.items():
        out[name] = np.repeat(
            np.array([value_of(m.metadata) for m in messages], np.int64), [len(m.batch) for m in messages]
        )
    return out

"""A batch as the publisher writes it: the payload and the fields beside it, under an
identity (a random producer id and a per-producer ``seq``) that a re-send keeps, so
consumers drop the second copy of a batch whose first XADD was written after all.

| field | meaning |
| --- | --- |
| ``payload`` | :func:`rolloutfleet.data.codec.encode` of the batch |
| ``worker_index``, ``env_steps`` | who produced it, how many rows |
| ``weights_seq_no``, ``weights_seq_no_min`` | the newest and the oldest weights version among its rows |
| ``created_at`` | unix seconds when it was first published |
| ``producer``, ``seq`` | the batch's identity |
| ``policy``, ``agent_steps``, ``agent_ids`` | a multi-agent policy's stream: whose rows, how many, which agents |
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rolloutfleet.data.batch import WEIGHTS_SEQ_NO, SampleBatch
from rolloutfleet.data.codec import Compression, encode, encode_multi

MAX_COUNT = 2**63 - 1
"""The largest worker index, step count or weights version an entry may claim (a weights
version is a Redis INCR: a signed 64-bit integer)."""


class PayloadTooLarge(ValueError):
    """An encoded batch is larger than the publisher's ``max_payload_bytes``."""


class BatchEntries:
    """The entries of one producer: each new batch under the next ``seq``; the batch whose
    publish failed keeps its fields (``created_at`` included) until :meth:`sent`."""

    def __init__(self, stream: str, policy: str | None, compression: Compression, max_payload_bytes: int) -> None:
        self.stream, self.policy, self.compression, self.max_payload_bytes = (
            stream,
            policy,
            compression,
            max_payload_bytes,
        )
        self.producer_id = uuid.uuid4().hex[:16]
        self._seq = 0
        self._unsent: tuple[Mapping[str, Any], dict[Any, Any]] | None = None
        """The batch whose publish failed, and the fields it was sent with (its identity)."""

    def entry(
        self,
        batch: Mapping[str, Any],
        weights_seq_no: int | None,
        worker_index: int,
        env_steps: int | None,
        agent_ids: Sequence[str] | None,
    ) -> tuple[dict[Any, Any], bool]:
        """The fields to XADD for ``batch``, and whether they are a re-send's (the same batch
        object as the last publish, which failed)."""
        if self._unsent is not None and self._unsent[0] is batch:
            return self._unsent[1], True
        fields = self._fields(batch, weights_seq_no, worker_index, env_steps, agent_ids)
        self._unsent = (batch, fields)
        return fields, False

    def sent(self) -> None:
        """The last entry is in the stream: the next batch gets a new identity."""
        self._unsent = None

    def _fields(
        self,
        batch: Mapping[str, Any],
        weights_seq_no: int | None,
        worker_index: int,
        env_steps: int | None,
        agent_ids: Sequence[str] | None,
    ) -> dict[Any, Any]:
        oldest, newest = weights_versions(batch, weights_seq_no)
        steps = _rows(batch) if env_steps is None else env_steps
        for name, value in (("worker_index", worker_index), ("env_steps", steps), ("weights_seq_no", oldest),
                            ("weights_seq_no", newest)):  # fmt: skip
            if not 0 <= int(value) <= MAX_COUNT:  # a learner's consumer would dead-letter the entry
                raise ValueError(f"{name} must be within 0 and 2**63 - 1, got {value}")
        if self.policy is not None:
            # One group named after the policy: the payload says whose it is on its own.
            payload = encode_multi({self.policy: _wire_columns(batch)}, self.compression)
        else:
            payload = encode(batch, self.compression)
        if len(payload) > self.max_payload_bytes:
            raise PayloadTooLarge(
                f"batch encodes to {len(payload):,} bytes, above max_payload_bytes={self.max_payload_bytes:,} "
                f"for stream {self.stream}: sample shorter fragments or enable compression"
            )
        fields: dict[Any, Any] = {
            b"payload": payload,
            b"worker_index": worker_index,
            b"weights_seq_no": newest,
            b"weights_seq_no_min": oldest,
            b"env_steps": steps,
            b"created_at": f"{time.time():.6f}",
            b"producer": self.producer_id,
            b"seq": self._seq,
        }
        if self.policy is not None:
            fields[b"policy"] = self.policy
            fields[b"agent_steps"] = _rows(batch)
            fields[b"agent_ids"] = json.dumps(list(agent_ids or ()))
        self._seq += 1
        return fields


def _wire_columns(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The columns the wire carries: text columns (``agent_id``) travel as ``agent_ids`` metadata."""
    return {
        name: value for name, value in batch.items() if getattr(value, "dtype", None) is None or value.dtype.kind != "U"
    }


def _rows(batch: Mapping[str, Any]) -> int:
    if isinstance(batch, SampleBatch):
        return len(batch)
    return next((len(value) for value in batch.values()), 0)


def weights_versions(batch: Mapping[str, Any], default: int | None = None) -> tuple[int, int]:
    """(oldest, newest) weights version among the rows of ``batch``, from its
    ``weights_seq_no`` column; ``default`` (0 if None) for a batch without one.

    >>> weights_versions({"weights_seq_no": np.array([7, 3, 7])})
    (3, 7)
    """
    column = batch.get(WEIGHTS_SEQ_NO)
    if column is None:
        version = 0 if default is None else int(default)
        return version, version
    versions = np.asarray(column)
    if versions.ndim != 1 or versions.dtype.kind not in "iu":
        raise ValueError(
            f"column {WEIGHTS_SEQ_NO!r} must be one integer per row, got {versions.dtype} of shape {versions.shape}"
        )
    if not len(versions):
        version = 0 if default is None else int(default)
        return version, version
    oldest, newest = int(versions.min()), int(versions.max())
    if default is not None and not oldest == newest == default:
        raise ValueError(
            f"weights_seq_no={default} passed with a batch whose {WEIGHTS_SEQ_NO!r} column holds versions "
            f"{oldest}..{newest}: the column is what is published; leave the argument out"
        )
    return oldest, newest

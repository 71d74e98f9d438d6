"""Observation filters shared by a job's workers through Redis, like RLlib's filter sync.

The central statistics live in Redis (:attr:`rolloutfleet.transport.redis.keys.JobKeys.filters`):
after each fragment a worker merges its delta (what it observed since the last sync) into
them in one optimistic transaction (WATCH, GET, MULTI/SET) and adopts the result; a
replacement worker starts from the fleet's statistics (:meth:`FilterSync.pull`); a learner
reads them with :func:`read_filter`. Stored with the codec's tensor encoding, never pickled;
a value that does not decode, has another shape or holds NaN/inf is rebuilt from this
worker's statistics, never adopted (:attr:`FilterSync.rebuilt`). Why each observation counts
exactly once: docs/transport.md ("Filter statistics").
"""

from __future__ import annotations

import logging

import numpy as np

from rolloutfleet.data.codec import DecodeError, decode_tensors, encode_tensors
from rolloutfleet.data.filters import MeanStdFilter, RunningStat
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import connect
from rolloutfleet.transport.redis.errors import Client, ConcurrentChange
from rolloutfleet.transport.redis.keys import JobKeys, job_keys

log = logging.getLogger(__name__)


def encode_stat(stat: RunningStat) -> bytes:
    return encode_tensors({"count": np.float64(stat.count), "mean": stat.mean, "m2": stat.m2})


def decode_stat(data: bytes | str, shape: tuple[int, ...] | None = None) -> RunningStat:
    """The statistics in ``data``; ``DecodeError`` when they are not (or not of ``shape``)."""
    if isinstance(data, str):  # a client with decode_responses: not ours
        raise DecodeError("filter statistics must be bytes")
    tensors = decode_tensors(data)
    try:
        stat = RunningStat.from_dict({"count": tensors["count"], "mean": tensors["mean"], "m2": tensors["m2"]})
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"not filter statistics: {exc}") from None
    if stat.m2.shape != stat.mean.shape or (shape is not None and stat.mean.shape != tuple(shape)):
        raise DecodeError(f"filter statistics of shape {stat.mean.shape}, expected {shape}")
    if not stat.is_finite():
        raise DecodeError(f"non-finite filter statistics (count {stat.count}, a NaN or an infinity in mean or m2)")
    return stat


class FilterSync:
    """Merges one worker's filter deltas into the fleet's statistics in Redis."""

    def __init__(self, client: Client, keys: JobKeys, max_attempts: int = 50) -> None:
        self.client = client
        self.key = keys.filters
        self.max_attempts = max_attempts
        self.conflicts = 0  # transactions retried because another worker committed first
        self.rebuilt = 0  # values in Redis that were not usable statistics, replaced by this worker's
        self._replacing_bad = False

    def _read(self, reader: Client, shape: tuple[int, ...], replacing: bool) -> RunningStat | None:
        raw = reader.get(self.key)
        if raw is None:
            return None
        try:
            return decode_stat(raw, shape)
        except DecodeError as exc:
            if replacing:
                log.error("%s: %s; replacing it with this worker's statistics", self.key, exc)
                self._replacing_bad = True
            else:
                log.error("%s: %s; not adopted (rebuilt at this worker's next sync)", self.key, exc)
            return None

    def pull(self, filt: MeanStdFilter) -> bool:
        """Adopt the fleet's statistics, if any (keeping what ``filt`` saw since its last flush)."""
        fleet = self._read(self.client, filt.shape, replacing=False)
        if fleet is None:
            return False
        filt.adopt(fleet)
        return True

    def push(self, filt: MeanStdFilter) -> RunningStat:
        """Merge ``filt``'s delta into the fleet's statistics, flush it, adopt the merged ones."""
        delta = filt.buffer.copy()
        for _ in range(self.max_attempts):
            self._replacing_bad = False
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.key)  # type: ignore[no-untyped-call]
                    fleet = self._read(pipe, filt.shape, replacing=True)
                    if fleet is None:
                        # No statistics (a new job, or Redis lost them): seed them with all
                        # this worker knows (what it adopted plus its delta), not the delta
                        # alone, so normalization does not collapse to one fragment's data.
                        merged = filt.stats.copy()
                    else:
                        merged = fleet
                        merged.merge(delta)
                    pipe.multi()
                    pipe.set(self.key, encode_stat(merged))
                    pipe.execute()
                except ConcurrentChange:
                    self.conflicts += 1
                    continue
            self.rebuilt += self._replacing_bad
            filt.flush()
            filt.adopt(merged)
            return merged
        raise ConcurrentChange(f"{self.key}: {self.max_attempts} transactions in a row lost to other workers")


def read_filter(
    redis_url: str, job: RolloutJob, password: str | None = None, policy: str | None = None
) -> MeanStdFilter | None:
    """The fleet's observation filter for ``job`` (a multi-agent job: for ``policy``), None
    before any worker synced one.

    >>> filt = read_filter("redis://127.0.0.1:6379/0", job)  # doctest: +SKIP
    >>> normalized = filt(obs, update=False)  # doctest: +SKIP
    """
    client = connect(redis_url, password, socket_timeout=10.0)
    try:
        raw = client.get(job_keys(job.namespace, job.name, policy).filters)
    finally:
        client.close()
    if raw is None:
        return None
    stat = decode_stat(raw)
    filt = MeanStdFilter(stat.mean.shape)
    filt.stats = stat
    return filt

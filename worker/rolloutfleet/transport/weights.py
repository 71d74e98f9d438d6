"""Policy weights through Redis: the learner publishes and announces versions, workers read
the newer ones (when announced: :mod:`rolloutfleet.transport.weights_news`).

    >>> publisher = WeightPublisher("redis://127.0.0.1:6379/0", "cartpole")   # doctest: +SKIP
    >>> publisher.publish(model)                                               # doctest: +SKIP
    1
    >>> subscriber = WeightSubscriber("redis://127.0.0.1:6379/0", "cartpole")  # doctest: +SKIP
    >>> update = subscriber.poll()              # None until a newer version exists  # doctest: +SKIP

A version is written as immutable chunks, then made current by one Lua script, so a reader
never sees a mix of two versions; versions never go back, even when Redis loses its state;
a version is checked (:mod:`rolloutfleet.data.weights_check`) before a worker loads it and
before a learner publishes it. ``policy=`` selects a multi-agent policy's own keys. The
protocol step by step, and why: docs/transport.md ("Weights").
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rolloutfleet.data.codec import Compression, DecodeError, decode_tensors, encode_tensors
from rolloutfleet.data.weights_check import Signature, check_weights, parse_signature, signature_json
from rolloutfleet.spec.job import RolloutJob
from rolloutfleet.transport.redis.connection import DEFAULT_RECONNECT_TIMEOUT_S, JobClient
from rolloutfleet.transport.redis.errors import BackendError, Client, OutOfMemory
from rolloutfleet.transport.redis.keys import job_keys
from rolloutfleet.transport.weights_news import RECHECK_S

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 64 << 20
WEIGHTS_SOCKET_TIMEOUT_S = 60.0
"""Also bounds sending one chunk (64 MiB in 60 s: 9 Mbit/s)."""
UPLOAD_TTL_S = 600
"""Chunks of a version that never became current (its publisher died) vanish after this."""

# KEYS: version key, new chunks..., ARGV: seq, "seq chunks bytes", grace seconds, tag prefix,
# news channel. Returns 0 (a newer version is current), 1, or 2 (current, but the announcement
# was refused: an ACL without the channel; workers then find it by their periodic read).
_PUBLISH_LUA = """
local current = redis.call('GET', KEYS[1])
local seq = tonumber(ARGV[1])
if current then
  local old_seq, old_chunks = string.match(current, '^(%d+) (%d+)')
  old_seq = tonumber(old_seq)
  if old_seq >= seq then
    return 0
  end
  for i = 0, tonumber(old_chunks) - 1 do
    redis.call('EXPIRE', ARGV[4] .. old_seq .. ':' .. i, tonumber(ARGV[3]))
  end
end
for i = 2, #KEYS do
  redis.call('PERSIST', KEYS[i])
end
redis.call('SET', KEYS[1], ARGV[2])
local announced = redis.pcall('PUBLISH', ARGV[5], ARGV[2])
if type(announced) == 'table' and announced.err then
  return 2
end
return 1
"""


# KEYS: counter, held key; ARGV: the version this publisher published last.
# Returns {seq, floor it had to go above (0: none), who held the floor}.
_NEXT_SEQ_LUA = """
local seq = redis.call('INCR', KEYS[1])
local floor, source = tonumber(ARGV[1]), 'this publisher'
local held = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if held > floor then
  floor, source = held, 'a worker'
end
if seq <= floor then
  seq = floor + 1
  redis.call('SET', KEYS[1], seq)
  return {seq, floor, source}
end
return {seq, 0, ''}
"""

# KEYS: held key; ARGV: the version a worker holds.
_HELD_LUA = """
local held = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tonumber(ARGV[1]) > held then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
"""


@dataclass(frozen=True)
class WeightsUpdate:
    """A version of the weights: name -> writable numpy array."""

    seq_no: int
    weights: dict[str, np.ndarray]


def to_numpy_state(weights: Any) -> dict[str, np.ndarray]:
    """A ``torch.nn.Module``'s state dict or a mapping of name -> tensor/array, as numpy."""
    if hasattr(weights, "state_dict") and callable(weights.state_dict):
        weights = weights.state_dict()
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights must be a torch module or a mapping of name -> tensor, got {type(weights).__name__}")
    out = {}
    for name, value in weights.items():
        if hasattr(value, "detach"):  # a torch tensor, without importing torch here
            value = value.detach().cpu()
            if str(value.dtype) == "torch.bfloat16":
                raise TypeError(f"weight {name!r} is bfloat16, which numpy (and the wire format) cannot carry")
            value = value.numpy()
        out[str(name)] = np.asarray(value)
    return out


def _parse_version(raw: Any) -> tuple[int, int, int] | None:
    if raw is None:
        return None
    try:
        seq, chunks, size = (int(part) for part in raw.split())
    except ValueError:
        raise DecodeError(f"weights version key holds {raw[:60]!r}, expected '<seq> <chunks> <bytes>'") from None
    return seq, chunks, size


class WeightPublisher(JobClient):
    """Learner side: :meth:`publish` a new version of the weights of job ``namespace/job``.

    >>> WeightPublisher(url, "cartpole").publish({"pi.weight": torch.zeros(2, 4)})  # doctest: +SKIP
    1

    ``policy``: the policy of a multi-agent job whose weights these are.

    ``reconnect_timeout_s``: how long a publish rides out a Redis that is away, then
    :class:`~rolloutfleet.transport.redis.connection.RedisUnavailable`.

    ``validate``: check each version before publishing it (finite values; names, shapes
    and dtypes against the model the workers recorded): a bad one raises
    :class:`~rolloutfleet.data.weights_check.WeightsRefused` and is not published.
    """

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        grace_s: int = 30,
        compression: Compression = "none",
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
        policy: str | None = None,
        socket_timeout_s: float = WEIGHTS_SOCKET_TIMEOUT_S,
        validate: bool = True,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        self.validate = validate
        if not 1 <= chunk_bytes <= 512 << 20:
            raise ValueError(f"chunk_bytes must be within 1 byte and 512 MiB (Redis' bulk limit), got {chunk_bytes}")
        self.keys = job_keys(namespace, job, policy)
        self.chunk_bytes = chunk_bytes
        self.grace_s = grace_s
        self.compression: Compression = compression
        super().__init__(
            redis_url, password, reconnect_timeout_s=reconnect_timeout_s, socket_timeout_s=socket_timeout_s
        )
        self._script = self.client.register_script(_PUBLISH_LUA)
        self._next_seq = self.client.register_script(_NEXT_SEQ_LUA)
        self.seq_no = 0
        """The version this publisher published last."""
        self.resets = 0
        """Times the version counter was found behind (Redis lost its state) and moved past."""
        self.unannounced = 0
        """Versions made current whose announcement Redis refused (said once)."""

    def publish(self, weights: Any) -> int:
        """Publish ``weights`` (module, state dict, or name -> array); returns its seq no.

        Atomic: readers see the previous version until this one is complete.
        """
        state = to_numpy_state(weights)
        if self.validate:
            check_weights(state, self._retry.call(self.model_signature))
        payload = memoryview(encode_tensors(state, self.compression))
        seq = self._retry.call(self._take_seq)
        chunks = [payload[i : i + self.chunk_bytes] for i in range(0, len(payload), self.chunk_bytes)] or [payload]
        names = [self.keys.weights_chunk(seq, i) for i in range(len(chunks))]

        version = f"{seq} {len(chunks)} {len(payload)}"

        def upload() -> int:
            pipe = self.client.pipeline(transaction=False)
            for name, chunk in zip(names, chunks, strict=True):
                pipe.set(name, chunk, ex=UPLOAD_TTL_S)  # type: ignore[arg-type]
            pipe.execute()
            return int(
                self._script(
                    keys=[self.keys.weights_version, *names],
                    args=[seq, version, self.grace_s, self.keys.weights_prefix, self.keys.weights_news],
                    client=self.client,
                )
            )

        made = self._retry.call(upload)
        if not made:
            log.warning("weights version %d was not made current: a newer version was published meanwhile", seq)
        elif made == 2 and not self.unannounced:
            log.warning(
                "this Redis user may not publish to %s (an ACL without the channel): version %d is current, and "
                "workers find it and the next ones by their periodic read (every %g s) instead of at once",
                self.keys.weights_news, seq, RECHECK_S,
            )  # fmt: skip
        self.unannounced += made == 2
        self.seq_no = max(self.seq_no, seq)
        return seq

    def model_signature(self) -> Signature | None:
        """The model the workers recorded (names -> shape, dtype), or None if none did."""
        raw = self.client.get(self.keys.weights_model)
        if raw is None:
            return None
        try:
            return parse_signature(raw)
        except ValueError as exc:
            log.warning("%s holds no model signature (%s): checking the values only", self.keys.weights_model, exc)
            return None

    def _take_seq(self) -> int:
        """The next version: the counter's, moved past what Redis forgot (see the module doc)."""
        keys = [self.keys.weights_counter, self.keys.weights_held]
        seq, floor, source = self._next_seq(keys=keys, args=[self.seq_no], client=self.client)
        if int(floor):
            self.resets += 1
            log.warning(
                "weights version counter %s went back (Redis lost its state?): continuing at %d, above version %d "
                "held by %s",
                self.keys.weights_counter, int(seq), int(floor), source.decode() if isinstance(source, bytes) else source,
            )  # fmt: skip
        return int(seq)


def _decode(parts: list[bytes], size: int) -> dict[str, np.ndarray]:
    if sum(len(part) for part in parts) != size:
        raise DecodeError(f"chunks hold {sum(map(len, parts))} bytes, expected {size}")
    # One copy into a writable buffer: torch warns on (and must not write to) read-only arrays.
    buffer = bytearray(size)
    offset = 0
    for part in parts:
        buffer[offset : offset + len(part)] = part
        offset += len(part)
    parts.clear()  # the chunks are freed before decoding
    return decode_tensors(buffer)


class WeightSubscriber(JobClient):
    """Worker side: :meth:`poll` returns the weights when a newer version than the one
    last returned (or ``seq_no``) is current, else ``None``. ``client``: a client of the job's
    Redis to share (a worker's publisher's: the connection it already holds), else its own.

    >>> subscriber = WeightSubscriber(url, "cartpole")   # doctest: +SKIP
    >>> if (update := subscriber.poll(held=runner.weights_seq_nos["default"])) is not None:  # doctest: +SKIP
    ...     runner.set_weights("default", update.weights, update.seq_no)
    """

    def __init__(
        self,
        redis_url: str,
        job: str | RolloutJob,
        namespace: str = "default",
        *,
        password: str | None = None,
        seq_no: int = 0,
        policy: str | None = None,
        socket_timeout_s: float = WEIGHTS_SOCKET_TIMEOUT_S,
        client: Client | None = None,
        reader: Client | None = None,
    ) -> None:
        if isinstance(job, RolloutJob):
            namespace, job = job.namespace, job.name
        self.keys = job_keys(namespace, job, policy)
        self.seq_no = seq_no
        self.reader = reader
        """A read replica to read versions from (``spec.redis.readReplicas``); writes stay on ``client``."""
        self.replica_failures = 0
        """Polls that found the read replica away and read the primary instead."""
        self._replica_down = False
        # One try (no reconnect window): a worker's own loop backs off and polls again.
        super().__init__(redis_url, password, reconnect_timeout_s=0.0, socket_timeout_s=socket_timeout_s, client=client)
        self._held = self.client.register_script(_HELD_LUA)
        self.resets = 0
        """Times the published version was found gone or older than the one held (Redis lost
        its state): logged and counted once per reset."""
        self._in_reset = False
        self.refused: tuple[int, str] | None = None
        """(version, reason) of the last version refused, until a newer one is accepted."""
        self.refusals = 0
        """Versions refused (each once)."""

    def refuse(self, seq_no: int, reason: str) -> None:
        """Refuse version ``seq_no`` (it does not fit, holds NaN/inf, cannot be decoded): one
        log line, counted, and not downloaded again; the weights held stay in use."""
        self.refused = (seq_no, " ".join(reason.split())[:300])
        self.refusals += 1
        log.warning("weights v%d (%s) refused, keeping the weights held: %s", seq_no, self.keys.weights_version,
                    self.refused[1])  # fmt: skip

    def accepted(self, seq_no: int) -> None:
        """Version ``seq_no`` was loaded: a refusal of an older one is no longer news."""
        if self.refused is not None and self.refused[0] <= seq_no:
            self.refused = None

    def record_model(self, signature: Signature) -> None:
        """Record the model's names, shapes and dtypes, for publishers to check versions against."""
        self.client.set(self.keys.weights_model, signature_json(signature))

    def current_seq_no(self) -> int | None:
        """The published version (one GET), or None if none was published."""
        version = _parse_version(self.client.get(self.keys.weights_version))
        return None if version is None else version[0]

    def poll(self, held: int | None = None) -> WeightsUpdate | None:
        """One GET; the download only when that names a version newer than ``seq_no``.

        ``held``: the version the caller samples with (a worker passes its runner's, so the
        runner stays the one record of what is loaded); default: the last version returned.
        """
        if held is not None:
            self.seq_no = held
        if self.reader is not None:
            try:
                update = self._poll(self.reader)
            except BackendError as exc:  # the replica away: the primary serves this poll
                self.replica_failures += 1
                if not self._replica_down:
                    log.warning("weights replica unreadable (%s): reading the primary until it is back", exc)
                self._replica_down = True
            else:
                if self._replica_down:
                    log.info("weights replica readable again: weights come from it")
                self._replica_down = False
                return update
        return self._poll(self.client)

    def _poll(self, source: Client) -> WeightsUpdate | None:
        for _ in range(8):
            version = _parse_version(source.get(self.keys.weights_version))
            if self.seq_no > 0 and (version is None or version[0] < self.seq_no):
                if source is not self.client:  # a replica behind what we hold: the primary says whether Redis reset
                    return self._poll(self.client)
                self._went_back(None if version is None else version[0])
                return None
            refused = 0 if self.refused is None else self.refused[0]
            if version is None or version[0] <= max(self.seq_no, refused):
                return None  # nothing newer (a refused version is not downloaded again)
            seq, count, size = version
            pipe = source.pipeline(transaction=False)
            for index in range(count):
                pipe.get(self.keys.weights_chunk(seq, index))
            parts = pipe.execute()
            if any(part is None for part in parts):
                continue  # replaced and expired while we looked: read the version again
            try:
                weights = _decode(parts, size)
            except DecodeError as exc:
                self.refuse(seq, f"cannot be decoded: {exc}")
                return None
            self.seq_no = seq
            self._in_reset = False
            return WeightsUpdate(seq, weights)
        log.warning("weights kept changing while downloading %s; trying again next poll", self.keys.weights_version)
        return None

    def _went_back(self, published: int | None) -> None:
        """The published version is gone or older than ours: keep our weights, say so once,
        and report ours so that the learner's next version is newer."""
        if not self._in_reset:
            self._in_reset = True
            self.resets += 1
            seen = "is gone" if published is None else f"went back to {published}"
            log.warning(
                "weights version %s %s while this worker holds version %d (Redis lost its state?): keeping it; "
                "the learner's next version continues above it",
                self.keys.weights_version, seen, self.seq_no,
            )  # fmt: skip
        with contextlib.suppress(OutOfMemory):  # reported again on the next poll
            self._held(keys=[self.keys.weights_held], args=[self.seq_no], client=self.client)

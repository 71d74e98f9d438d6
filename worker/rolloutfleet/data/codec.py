"""The wire format of batches and weights: a self-describing header, then raw buffers.

No pickle, ever: a payload read from Redis is data, never code. Decoding is zero-copy
(every column is an ``np.frombuffer`` view into the received bytes) and every malformed
input raises :class:`DecodeError` before anything the header claims is allocated::

    payload = encode(batch)                  # bytes, ready for XADD
    again = decode(payload)                  # SampleBatch of read-only views into payload
    payload = encode(batch, compression="lz4")

Layout (little-endian; sizes in bytes)::

    prefix   32  magic b"RFLT", version u8, flags u8, group count u16,
                 header length u32, header CRC-32 u32,
                 data length u64 (decoded), stored data length u64 (as sent)
    header   *   per group: policy id (u16 length + UTF-8), rows u64, array count u16;
                 per array: name (u16 length + UTF-8), dtype code u8, ndim u8,
                 dims u64 x ndim, offset u64 into the data section
    padding      zeros up to a multiple of 64
    data     *   the arrays' raw C-order buffers, each starting at a multiple of 64
                 (so views are aligned for every dtype); lz4 or zstd compressed as
                 one frame when the flags say so

A payload holds one or more *groups*, each a named set of arrays. A single-agent batch is
one group whose policy id is ``"default"``; a multi-agent batch is one group per policy
id (:func:`encode_multi` / :func:`decode_multi`); weights are one group of arbitrarily
shaped tensors (``FLAG_TENSORS``: no shared row count, 0-d arrays allowed).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

from rolloutfleet.data.batch import DEFAULT_POLICY, SampleBatch

MAGIC = b"RFLT"
VERSION = 1
ALIGNMENT = 64

FLAG_LZ4 = 0x01
FLAG_ZSTD = 0x02
FLAG_TENSORS = 0x04
_KNOWN_FLAGS = FLAG_LZ4 | FLAG_ZSTD | FLAG_TENSORS


Compression = Literal["none", "lz4", "zstd"]

# Only plain numeric and bool dtypes: their bytes are always a valid value, and none of
# them can carry object references. The codes are part of the wire format: never reuse.
_DTYPES: dict[int, np.dtype[Any]] = {
    1: np.dtype("?"),
    2: np.dtype("<i1"),
    3: np.dtype("<u1"),
    4: np.dtype("<i2"),
    5: np.dtype("<u2"),
    6: np.dtype("<i4"),
    7: np.dtype("<u4"),
    8: np.dtype("<i8"),
    9: np.dtype("<u8"),
    10: np.dtype("<f2"),
    11: np.dtype("<f4"),
    12: np.dtype("<f8"),
}
_CODES: dict[str, int] = {dtype.str.lstrip("<|="): code for code, dtype in _DTYPES.items()}
_WIRE_DTYPES = frozenset(_DTYPES.values())
SUPPORTED_DTYPES = tuple(dtype.name for dtype in _DTYPES.values())

_PREFIX = struct.Struct("<4sBBHIIQQ")
_U16 = struct.Struct("<H")
_GROUP = struct.Struct("<QH")
_ARRAY = struct.Struct("<BB")
_U64 = struct.Struct("<Q")
_MAX_NDIM = 32
_DIMS = [struct.Struct(f"<{n}Q") for n in range(_MAX_NDIM + 1)]
# numpy refuses arrays whose element count (zero dims counted as 1) times the item size
# passes the largest signed 64-bit value, even when they are empty.
_MAX_ELEMENTS_BYTES = 1 << 62

# Headers built (encode) and parsed (decode) are cached per layout, up to this many.
_MAX_CACHED_LAYOUTS = 256
_MAX_CACHED_HEADER = 16 << 10
# Decompression grows its output in steps of this size, so a header that lies about
# the decoded size costs at most what the compressed frame really expands to.
_DECOMPRESS_STEP = 16 << 20
_LZ4_MAX_RATIO = 255


class DecodeError(ValueError):
    """The payload is not a valid RolloutFleet payload (the message says what is wrong)."""


class EncodeError(ValueError):
    """The batch cannot be encoded (an unsupported dtype, a name too long, ...)."""


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def _wire_array(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype in _WIRE_DTYPES and array.flags.c_contiguous:
        return array  # the common case, decided by one dict lookup
    code = _CODES.get(array.dtype.str.lstrip("<>|="))
    if code is None:
        raise EncodeError(
            f"array {name!r} has dtype {array.dtype}, which the wire format does not carry; "
            f"use one of {', '.join(SUPPORTED_DTYPES)}"
        )
    wire = _DTYPES[code]
    if array.dtype != wire:  # big-endian input: the wire is little-endian
        array = array.astype(wire)
    # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones.
    return array if array.flags.c_contiguous else array.copy(order="C")


def _name_bytes(kind: str, name: str) -> bytes:
    if not isinstance(name, str):
        raise EncodeError(f"{kind} {name!r} must be a str, got {type(name).__name__}")
    raw = name.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise EncodeError(f"{kind} {name[:40]!r}... is {len(raw)} bytes long; at most 65535")
    return raw


_Signature = tuple[bool, tuple[tuple[Any, tuple[tuple[Any, str, tuple[int, ...]], ...]], ...]]
_HEADERS: dict[_Signature, tuple[bytes, list[int], int]] = {}


def _build_header(groups: list[tuple[str, dict[str, np.ndarray]]], tensors: bool) -> tuple[bytes, list[int], int]:
    """Header bytes, each array's data offset, and the data length, for this layout."""
    if len(groups) > 0xFFFF:
        raise EncodeError(f"{len(groups)} policies in one payload; at most 65535")
    header = bytearray()
    offsets = []
    offset = 0
    for policy_id, arrays in groups:
        if len(arrays) > 0xFFFF:
            raise EncodeError(f"policy {policy_id!r} has {len(arrays)} arrays; at most 65535")
        rows = 0
        if not tensors:
            lengths = {name: (len(a) if a.ndim else -1) for name, a in arrays.items()}
            if any(n < 0 for n in lengths.values()):
                raise EncodeError(f"policy {policy_id!r}: scalar columns {[k for k, n in lengths.items() if n < 0]}")
            if len(set(lengths.values())) > 1:
                raise EncodeError(f"policy {policy_id!r}: columns differ in length: {lengths}")
            rows = next(iter(lengths.values()), 0)
        raw_id = _name_bytes("policy id", policy_id)
        header += _U16.pack(len(raw_id)) + raw_id + _GROUP.pack(rows, len(arrays))
        for name, array in arrays.items():
            if array.ndim > _MAX_NDIM:
                raise EncodeError(f"array {name!r} has {array.ndim} dimensions; at most {_MAX_NDIM} are supported")
            raw_name = _name_bytes("column", name)
            header += _U16.pack(len(raw_name)) + raw_name
            header += _ARRAY.pack(_CODES[array.dtype.str.lstrip("<|=")], array.ndim)
            header += _DIMS[array.ndim].pack(*array.shape) + _U64.pack(offset)
            offsets.append(offset)
            offset = _align(offset + array.nbytes)
    return bytes(header), offsets, offset


def _encode_groups(
    groups: Mapping[str, Mapping[str, Any]], compression: Compression, tensors: bool, level: int | None
) -> bytes:
    prepared = [
        (policy_id, {n: _wire_array(n, v) for n, v in columns.items()}) for policy_id, columns in groups.items()
    ]
    # A worker encodes the same layout every fragment: build its header once.
    signature: _Signature = (
        tensors,
        tuple((p, tuple((n, a.dtype.str, a.shape) for n, a in arrays.items())) for p, arrays in prepared),
    )
    cached = _HEADERS.get(signature)
    if cached is None:
        cached = _build_header(prepared, tensors)
        if len(_HEADERS) >= _MAX_CACHED_LAYOUTS:
            _HEADERS.clear()
        _HEADERS[signature] = cached
    header, offsets, data_len = cached
    data: list[bytes | memoryview] = []
    cursor = 0
    arrays = (array for _, group in prepared for array in group.values())
    for start, array in zip(offsets, arrays, strict=True):
        if not array.nbytes:
            continue
        if start > cursor:
            data.append(_ZEROS[: start - cursor])
        data.append(array.data.cast("B"))
        cursor = start + array.nbytes
    if data_len > cursor:
        data.append(_ZEROS[: data_len - cursor])
    flags = FLAG_TENSORS if tensors else 0
    if compression == "none":
        stored_len = data_len
    elif compression in ("lz4", "zstd"):
        packed = _compress(b"".join(data), compression, level)
        flags |= FLAG_LZ4 if compression == "lz4" else FLAG_ZSTD
        data, stored_len = [packed], len(packed)
    else:
        raise EncodeError(f"compression must be 'none', 'lz4' or 'zstd', got {compression!r}")
    prefix = _PREFIX.pack(MAGIC, VERSION, flags, len(prepared), len(header), zlib.crc32(header), data_len, stored_len)
    padding = _ZEROS[: _align(len(prefix) + len(header)) - len(prefix) - len(header)]
    # One join: the only copy of the column data an encode makes.
    return b"".join([prefix, header, padding, *data])


_ZEROS = bytes(ALIGNMENT)


def _compress(data: bytes, compression: str, level: int | None) -> bytes:
    if compression == "lz4":
        import lz4.frame

        return bytes(lz4.frame.compress(data, compression_level=level or 0, store_size=True))
    import zstandard

    # Level 1: ~3x on Atari-like frames at ~400 MB/s (measured on a 2-core machine); higher levels cost far more.
    return bytes(zstandard.ZstdCompressor(level=level or 1).compress(data))


def encode(batch: Mapping[str, Any], compression: Compression = "none", level: int | None = None) -> bytes:
    """One batch (a :class:`SampleBatch` or any mapping of column name -> array) as bytes.

    >>> payload = encode({"obs": np.zeros((4, 2), np.float32), "actions": np.arange(4)})
    >>> decode(payload)["obs"].shape
    (4, 2)
    """
    return _encode_groups({DEFAULT_POLICY: batch}, compression, tensors=False, level=level)


def encode_multi(
    batches: Mapping[str, Mapping[str, Any]], compression: Compression = "none", level: int | None = None
) -> bytes:
    """A multi-agent batch: one batch per policy id, in one payload.

    >>> payload = encode_multi({"left": {"obs": np.zeros(3)}, "right": {"obs": np.ones(5)}})
    >>> {k: len(v) for k, v in decode_multi(payload).items()}
    {'left': 3, 'right': 5}
    """
    return _encode_groups(batches, compression, tensors=False, level=level)


def encode_tensors(tensors: Mapping[str, Any], compression: Compression = "none", level: int | None = None) -> bytes:
    """Named arrays of any shape (0-d included), e.g. a model's weights.

    >>> decode_tensors(encode_tensors({"step": np.int64(7)}))["step"]
    array(7)
    """
    return _encode_groups({DEFAULT_POLICY: tensors}, compression, tensors=True, level=level)


class _Reader:
    """Bounds-checked cursor over the header: every read past the end is a DecodeError."""

    __slots__ = ("buffer", "end", "position")

    def __init__(self, buffer: memoryview, start: int, end: int) -> None:
        self.buffer, self.position, self.end = buffer, start, end

    def unpack(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        if self.position + layout.size > self.end:
            raise DecodeError(f"header truncated while reading {what}")
        values = layout.unpack_from(self.buffer, self.position)
        self.position += layout.size
        return values

    def name(self, what: str) -> str:
        (length,) = self.unpack(_U16, f"the length of {what}")
        if self.position + length > self.end:
            raise DecodeError(f"header truncated inside {what}")
        raw = bytes(self.buffer[self.position : self.position + length])
        self.position += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError(f"{what} is not valid UTF-8") from None


def _decode_groups(
    data: bytes | bytearray | memoryview, want_tensors: bool
) -> dict[str, tuple[int, dict[str, np.ndarray]]]:
    try:
        view = memoryview(data).cast("B")
    except TypeError as exc:
        raise DecodeError(f"payload must be bytes-like, got {type(data).__name__}") from exc
    total = len(view)
    if total < _PREFIX.size:
        raise DecodeError(f"payload is {total} bytes, shorter than the {_PREFIX.size}-byte prefix")
    magic, version, flags, n_groups, header_len, header_crc, data_len, stored_len = _PREFIX.unpack_from(view, 0)
    if magic != MAGIC:
        raise DecodeError(f"not a RolloutFleet payload: magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise DecodeError(f"payload format version {version}; this reader understands version {VERSION}")
    if flags & ~_KNOWN_FLAGS:
        raise DecodeError(f"unknown flags 0x{flags:02x} (known: 0x{_KNOWN_FLAGS:02x})")
    if flags & FLAG_LZ4 and flags & FLAG_ZSTD:
        raise DecodeError("flags claim both lz4 and zstd compression")
    is_tensors = bool(flags & FLAG_TENSORS)
    if is_tensors != want_tensors:
        kind = "named tensors (weights)" if is_tensors else "a batch"
        raise DecodeError(f"payload holds {kind}; use {'decode_tensors' if is_tensors else 'decode'}")
    header_end = _PREFIX.size + header_len
    data_start = _align(header_end)
    # Every size is checked against the real payload length before anything is built.
    if data_start + stored_len != total:
        raise DecodeError(
            f"payload is {total} bytes but its prefix describes {data_start + stored_len} "
            f"(header {header_len}, data {stored_len})"
        )
    header = bytes(view[_PREFIX.size : header_end])
    if zlib.crc32(header) != header_crc:
        raise DecodeError("header checksum mismatch (corrupted or truncated payload)")
    compressed = bool(flags & (FLAG_LZ4 | FLAG_ZSTD))
    if not compressed and data_len != stored_len:
        raise DecodeError(f"uncompressed payload claims {data_len} data bytes but carries {stored_len}")
    # Workers send the same layout again and again: a header (with the sizes its checks
    # depended on) that passed once is not parsed again. Halves decode time of small batches.
    key = (flags, n_groups, data_len, header)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _parse_header(header, n_groups, data_len, is_tensors)
        if len(header) <= _MAX_CACHED_HEADER:
            if len(_LAYOUTS) >= _MAX_CACHED_LAYOUTS:
                _LAYOUTS.clear()
            _LAYOUTS[key] = layout
    body: memoryview | bytes = view[data_start:]
    if compressed:
        body = _decompress(body, "lz4" if flags & FLAG_LZ4 else "zstd", data_len)
    return {
        policy_id: (rows, {name: np.frombuffer(body, dtype, count, offset).reshape(shape)
                           for name, dtype, shape, count, offset in arrays})
        for policy_id, rows, arrays in layout
    }  # fmt: skip


_Layout = list[tuple[str, int, list[tuple[str, np.dtype[Any], tuple[int, ...], int, int]]]]
_LAYOUTS: dict[tuple[int, int, int, bytes], _Layout] = {}


def _parse_header(header: bytes, n_groups: int, data_len: int, is_tensors: bool) -> _Layout:
    reader = _Reader(memoryview(header), 0, len(header))
    layout: _Layout = []
    for _ in range(n_groups):
        policy_id = reader.name("a policy id")
        rows, n_arrays = reader.unpack(_GROUP, f"policy {policy_id!r}")
        arrays = []
        for _ in range(n_arrays):
            name = reader.name(f"a column name of policy {policy_id!r}")
            code, ndim = reader.unpack(_ARRAY, f"column {name!r}")
            dtype = _DTYPES.get(code)
            if dtype is None:
                raise DecodeError(f"column {name!r}: unknown dtype code {code}")
            if ndim > _MAX_NDIM or (ndim == 0 and not is_tensors):
                raise DecodeError(f"column {name!r}: {ndim} dimensions is not valid here")
            shape = reader.unpack(_DIMS[ndim], f"the shape of column {name!r}")
            (offset,) = reader.unpack(_U64, f"the offset of column {name!r}")
            if not is_tensors and shape[0] != rows:
                raise DecodeError(f"column {name!r} has {shape[0]} rows; policy {policy_id!r} has {rows}")
            if math.prod(max(dim, 1) for dim in shape) * dtype.itemsize >= _MAX_ELEMENTS_BYTES:
                raise DecodeError(f"column {name!r}: shape {shape} is impossibly large")
            count = math.prod(shape)
            if offset % ALIGNMENT or offset + count * dtype.itemsize > data_len:
                raise DecodeError(
                    f"column {name!r}: {count * dtype.itemsize} bytes at offset {offset} lie outside "
                    f"the {data_len}-byte data"
                )
            arrays.append((name, dtype, shape, count, offset))
        if policy_id in {g[0] for g in layout}:
            raise DecodeError(f"policy id {policy_id!r} appears twice")
        if len({a[0] for a in arrays}) != len(arrays):
            raise DecodeError(f"policy {policy_id!r} repeats a column name")
        layout.append((policy_id, rows, arrays))
    if reader.position != len(header):
        raise DecodeError(f"header has {len(header) - reader.position} unexplained trailing bytes")
    return layout


def _decompress(body: memoryview | bytes, compression: str, data_len: int) -> bytes:
    chunks: list[bytes] = []
    produced = 0
    try:
        if compression == "lz4":
            import lz4.frame

            # LZ4 cannot expand data more than ~255x, so a frame whose declared size agrees
            # with the header and that bound is decoded in one call (2-3x faster than
            # streaming), allocating at most 255x what was received.
            if data_len > _LZ4_MAX_RATIO * len(body) + 64:
                raise DecodeError(f"lz4 data of {len(body)} bytes cannot expand to the {data_len} the header claims")
            if lz4.frame.get_frame_info(body).get("content_size") == data_len:
                out = bytes(lz4.frame.decompress(body))
                if len(out) != data_len:
                    raise DecodeError(f"lz4 data expands to {len(out)} bytes, header says {data_len}")
                return out
            lz4_stream = lz4.frame.LZ4FrameDecompressor()
            while not lz4_stream.eof:
                chunk = lz4_stream.decompress(
                    b"" if produced or chunks else body, max_length=min(_DECOMPRESS_STEP, data_len - produced + 1)
                )
                if not chunk and not lz4_stream.eof and lz4_stream.needs_input:
                    raise DecodeError("lz4 data is truncated")
                produced += len(chunk)
                chunks.append(chunk)
                if produced > data_len:
                    break
            if lz4_stream.unused_data:
                raise DecodeError("trailing bytes after the lz4 frame")
        else:
            import zstandard

            zstd_stream = zstandard.ZstdDecompressor().stream_reader(body)
            while produced <= data_len:
                chunk = zstd_stream.read(min(_DECOMPRESS_STEP, data_len - produced + 1))
                if not chunk:
                    break
                produced += len(chunk)
                chunks.append(chunk)
    except ImportError as exc:
        raise DecodeError(f"payload is {compression}-compressed but {exc.name} is not installed") from exc
    except DecodeError:
        raise
    except Exception as exc:  # each library has its own error types; all mean "corrupt"
        raise DecodeError(f"{compression} data is corrupt: {exc}") from exc
    if produced != data_len:
        raise DecodeError(f"{compression} data expands to {produced} bytes{'+' if produced > data_len else ''}, "
                          f"header says {data_len}")  # fmt: skip
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decode(data: bytes | bytearray | memoryview) -> SampleBatch:
    """The batch in ``data``: zero-copy, read-only views into ``data`` (unless compressed).

    Raises :class:`DecodeError` for anything that is not a single-policy batch payload.

    >>> batch = decode(encode({"rewards": np.ones(3, np.float32)}))
    >>> batch["rewards"].tolist(), batch["rewards"].flags.writeable
    ([1.0, 1.0, 1.0], False)
    """
    groups = decode_multi(data)
    if len(groups) != 1:
        raise DecodeError(f"payload holds {len(groups)} policies {sorted(groups)}; use decode_multi")
    return next(iter(groups.values()))


def decode_multi(data: bytes | bytearray | memoryview) -> dict[str, SampleBatch]:
    """Policy id -> batch, for payloads of :func:`encode_multi` (or :func:`encode`: ``{"default": ...}``)."""
    try:
        groups = _decode_groups(data, want_tensors=False)
        return {policy: _sample_batch(columns, rows) for policy, (rows, columns) in groups.items()}
    except DecodeError:
        raise
    except (ValueError, TypeError, struct.error, OverflowError, MemoryError) as exc:
        raise DecodeError(f"malformed payload: {exc}") from exc


def decode_tensors(data: bytes | bytearray | memoryview) -> dict[str, np.ndarray]:
    """Name -> array, for payloads of :func:`encode_tensors` (writable if ``data`` is)."""
    try:
        groups = _decode_groups(data, want_tensors=True)
    except DecodeError:
        raise
    except (ValueError, TypeError, struct.error, OverflowError, MemoryError) as exc:
        raise DecodeError(f"malformed payload: {exc}") from exc
    if len(groups) != 1:
        raise DecodeError(f"a tensors payload must hold one group, this one holds {len(groups)}")
    return next(iter(groups.values()))[1]


def _sample_batch(columns: dict[str, np.ndarray], rows: int) -> SampleBatch:
    """A SampleBatch of columns the header checks already proved equally long.

    SampleBatch's constructor re-validates every column, which costs as much as the rest
    of a decode; the checks it would make have been made above.
    """
    batch = SampleBatch.__new__(SampleBatch)
    batch._columns = columns
    batch._rows = rows
    return batch

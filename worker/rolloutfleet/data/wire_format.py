"""The wire format's constants: the payload layout below, its dtype codes and limits, the
codec's errors. Encoding is :mod:`rolloutfleet.data.codec`, parsing :mod:`rolloutfleet.data.wire_decode`.

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
"""

from __future__ import annotations

import struct
from typing import Any, Literal

import numpy as np

MAGIC = b"RFLT"
VERSION = 1
ALIGNMENT = 64

FLAG_LZ4 = 0x01
FLAG_ZSTD = 0x02
FLAG_TENSORS = 0x04
KNOWN_FLAGS = FLAG_LZ4 | FLAG_ZSTD | FLAG_TENSORS


Compression = Literal["none", "lz4", "zstd"]

# Only plain numeric and bool dtypes: their bytes are always a valid value, and none of
# them can carry object references. The codes are part of the wire format: never reuse.
DTYPES: dict[int, np.dtype[Any]] = {
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
CODES: dict[str, int] = {dtype.str.lstrip("<|="): code for code, dtype in DTYPES.items()}
WIRE_DTYPES = frozenset(DTYPES.values())
SUPPORTED_DTYPES = tuple(dtype.name for dtype in DTYPES.values())

PREFIX = struct.Struct("<4sBBHIIQQ")
U16 = struct.Struct("<H")
GROUP = struct.Struct("<QH")
ARRAY = struct.Struct("<BB")
U64 = struct.Struct("<Q")
MAX_NDIM = 32
DIMS = [struct.Struct(f"<{n}Q") for n in range(MAX_NDIM + 1)]
# numpy refuses arrays whose element count (zero dims counted as 1) times the item size
# passes the largest signed 64-bit value, even when they are empty.
MAX_ELEMENTS_BYTES = 1 << 62

# Headers built (encode) and parsed (decode) are cached per layout, up to this many.
MAX_CACHED_LAYOUTS = 256
MAX_CACHED_HEADER = 16 << 10
# Decompression grows its output in steps of this size, so a header that lies about
# the decoded size costs at most what the compressed frame really expands to.
DECOMPRESS_STEP = 16 << 20
LZ4_MAX_RATIO = 255


class DecodeError(ValueError):
    """The payload is not a valid RolloutFleet payload (the message says what is wrong)."""


class EncodeError(ValueError):
    """The batch cannot be encoded (an unsupported dtype, a name too long, ...)."""


def align(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGNMENT`."""
    return -(-n // ALIGNMENT) * ALIGNMENT


ZEROS = bytes(ALIGNMENT)

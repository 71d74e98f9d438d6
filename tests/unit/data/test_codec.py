"""The wire format: every dtype and shape round-trips, decode is zero-copy, and any
malformed input — random, truncated, bit-flipped — raises DecodeError, quickly."""

from __future__ import annotations

import contextlib
import struct
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rolloutfleet.data.batch import SampleBatch
from rolloutfleet.data.codec import (
    SUPPORTED_DTYPES,
    DecodeError,
    EncodeError,
    decode,
    decode_multi,
    decode_tensors,
    encode,
    encode_multi,
    encode_tensors,
)

COMPRESSIONS = ["none", "lz4", "zstd"]


def sample_array(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_every_dtype_round_trips(dtype: str, compression: str) -> None:
    columns = {"flat": sample_array(dtype, (7,)), "image": sample_array(dtype, (7, 3, 5, 2), seed=1)}
    batch = decode(encode(columns, compression=compression))  # type: ignore[arg-type]
    assert isinstance(batch, SampleBatch) and len(batch) == 7
    for name, array in columns.items():
        assert_same(batch[name], array)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_zero_rows_and_empty_inner_dims_round_trip(compression: str) -> None:
    columns = {"obs": np.zeros((0, 84, 84, 4), np.uint8), "a": np.zeros(0, np.int64), "e": np.zeros((0, 0), np.float32)}
    batch = decode(encode(columns, compression=compression))  # type: ignore[arg-type]
    assert len(batch) == 0
    for name, array in columns.items():
        assert_same(batch[name], array)
    assert len(decode(encode({}))) == 0


def test_decode_is_zero_copy_aligned_and_read_only() -> None:
    columns = {"obs": sample_array("float32", (100, 4)), "done": sample_array("bool", (100,)), "t": np.arange(100)}
    payload = encode(columns)
    batch = decode(payload)
    raw = np.frombuffer(payload, np.uint8)
    for name in columns:
        assert np.shares_memory(batch[name], raw), name
        assert batch[name].flags.aligned
        assert not batch[name].flags.writeable
    # A memoryview slice (e.g. part of a larger receive buffer) works the same way.
    framed = bytearray(b"xx" * 32) + payload
    view = memoryview(framed)[64:]
    assert np.shares_memory(decode(view)["obs"], np.frombuffer(framed, np.uint8))


def test_non_contiguous_and_big_endian_inputs_are_normalised() -> None:
    base = np.arange(40, dtype=">i4").reshape(10, 4)
    batch = decode(encode({"strided": base[:, ::2], "big": base}))
    assert_same(batch["strided"], base[:, ::2].astype("<i4"))
    assert batch["big"].dtype == np.dtype("<i4")
    np.testing.assert_array_equal(batch["big"], base)


def test_sample_batch_input() -> None:
    batch = SampleBatch({"obs": np.ones((3, 2), np.float32), "rewards": np.zeros(3, np.float32)})
    assert list(decode(encode(batch))) == ["obs", "rewards"]


def test_multi_agent_payload_carries_one_batch_per_policy() -> None:
    payload = encode_multi({"pursuer": {"obs": np.ones((3, 2))}, "evader": {"obs": np.zeros((5, 2)), "x": np.ones(5)}})
    batches = decode_multi(payload)
    assert {k: len(v) for k, v in batches.items()} == {"pursuer": 3, "evader": 5}
    with pytest.raises(DecodeError, match="2 policies"):
        decode(payload)
    assert list(decode_multi(encode({"a": np.ones(2)}))) == ["default"]


def test_tensors_allow_any_shape_and_are_not_batches() -> None:
    tensors = {"step": np.int64(3), "w": sample_array("float32", (4, 5)), "b": np.zeros(5, np.float16)}
    payload = encode_tensors(tensors)
    decoded = decode_tensors(payload)
    for name, array in tensors.items():
        assert_same(decoded[name], np.asarray(array))
    with pytest.raises(DecodeError, match="decode_tensors"):
        decode(payload)
    with pytest.raises(DecodeError, match="use decode"):
        decode_tensors(encode({"a": np.ones(2)}))


@pytest.mark.parametrize(
    ("columns", "match"),
    [
        ({"o": np.array(["a", "b"])}, "'o' has dtype <U1"),
        ({"o": np.array([object(), 1], dtype=object)}, "'o' has dtype object"),
        ({"c": np.ones(2, np.complex64)}, "'c' has dtype complex64"),
        ({"a": np.ones(2), "b": np.ones(3)}, "differ in length"),
        ({"s": np.float32(1.0)}, "scalar"),
    ],
)
def test_unencodable_batches_name_the_column(columns: dict[str, np.ndarray], match: str) -> None:
    with pytest.raises(EncodeError, match=match):
        encode(columns)


def _forge(groups_header: bytes, data: bytes, data_len: int | None = None, flags: int = 0) -> bytes:
    """A payload with a hand-written header (valid prefix and CRC), to test the bounds checks."""
    prefix_size = 32
    header_end = prefix_size + len(groups_header)
    pad = -header_end % 64
    prefix = struct.pack(
        "<4sBBHIIQQ", b"RFLT", 1, flags, 1, len(groups_header), zlib.crc32(groups_header),
        len(data) if data_len is None else data_len, len(data),
    )  # fmt: skip
    return prefix + groups_header + bytes(pad) + data


def _column_header(rows: int, shape: tuple[int, ...], offset: int = 0, code: int = 3) -> bytes:
    name = b"obs"
    return (
        struct.pack("<H", 7) + b"default" + struct.pack("<QH", rows, 1)
        + struct.pack("<H", len(name)) + name + struct.pack("<BB", code, len(shape))
        + struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<Q", offset)
    )  # fmt: skip


def test_a_header_claiming_terabytes_fails_fast_without_allocating() -> None:
    huge = _forge(_column_header(1 << 40, (1 << 40, 1 << 20)), bytes(64))
    started = time.perf_counter()
    with pytest.raises(DecodeError, match=r"outside|impossibly"):
        decode(huge)
    assert time.perf_counter() - started < 0.01
    with pytest.raises(DecodeError, match="impossibly large"):
        decode(_forge(_column_header(0, (0, 1 << 40, 1 << 40)), b""))
    # Compressed: the claimed decoded size is never allocated up front.
    lie = _forge(_column_header(1 << 30, (1 << 30,)), b"\x04\x22\x4d\x18" + bytes(20), data_len=1 << 30, flags=1)
    with pytest.raises(DecodeError):
        decode(lie)


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"", "shorter than"),
        (b"NOPE" + bytes(60), "magic"),
        (encode({"a": np.ones(2)})[:4] + b"\x09" + encode({"a": np.ones(2)})[5:], "version 9"),
        (encode({"a": np.ones(2)}) + b"\x00", "describes"),
        (_forge(_column_header(2, (2,), code=99), bytes(64)), "unknown dtype code 99"),
        (_forge(_column_header(2, (3,)), bytes(64)), "has 3 rows"),
        (_forge(_column_header(2, (2,), offset=8), bytes(64)), "outside"),
    ],
)
def test_malformed_payloads_say_what_is_wrong(payload: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode(payload)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(DecodeError, match="bytes-like"):
        decode("not bytes")  # type: ignore[arg-type]


def _valid_payloads() -> list[bytes]:
    columns = {"obs": sample_array("float32", (6, 3)), "done": sample_array("bool", (6,)), "id": np.arange(6)}
    return [
        encode(columns),
        encode(columns, compression="lz4"),
        encode(columns, compression="zstd"),
        encode_multi({"a": columns, "b": {"x": np.ones(2, np.uint8)}}),
        encode_tensors({"w": np.ones((2, 2)), "s": np.int32(1)}),
    ]


VALID = _valid_payloads()
# No deadline: a shared CI machine makes timings noise; the size checks are what keeps decode fast.
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_any(payload: bytes) -> None:
    """Only DecodeError may escape, and it must come fast."""
    started = time.perf_counter()
    for decoder in (decode, decode_multi, decode_tensors):
        with contextlib.suppress(DecodeError):
            decoder(payload)
    assert time.perf_counter() - started < 0.1


@FUZZ
@given(st.binary(max_size=512))
def test_fuzz_random_bytes(data: bytes) -> None:
    _decode_any(data)
    _decode_any(VALID[0][:32] + data)  # a valid prefix, garbage after it


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_fuzz_truncated(payload: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(payload) - 1))
    with pytest.raises(DecodeError):
        decode_multi(payload[:cut])
    _decode_any(payload[:cut])


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_fuzz_bit_flips_and_splices(payload: bytes, data: st.DataObject) -> None:
    mutated = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] ^= 1 << data.draw(st.integers(0, 7))
    _decode_any(bytes(mutated))
    start = data.draw(st.integers(0, len(payload)))
    insert = data.draw(st.binary(max_size=16))
    _decode_any(payload[:start] + insert + payload[start:])


def test_bit_flips_in_the_header_are_always_caught() -> None:
    payload = encode({"obs": np.ones((4, 4), np.float32)})
    header_end = 32 + struct.unpack_from("<I", payload, 8)[0]
    for position in range(header_end):
        for bit in range(8):
            mutated = bytearray(payload)
            mutated[position] ^= 1 << bit
            with pytest.raises(DecodeError):
                decode(bytes(mutated))

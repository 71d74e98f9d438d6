"""The PNG the soak draws, decoded with zlib alone: valid, the size asked for, lines where the data is."""

from __future__ import annotations

import struct
import zlib

import pytest

from bench.png_chart import FONT, PALETTE, Series, line_chart_png, ticks


def decode(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, RGB rows) of an 8-bit RGB PNG with filter 0 on every row."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind] = data
        at += 12 + length
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    rows = [raw[y * stride : (y + 1) * stride] for y in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, [row[1:] for row in rows]


def test_a_chart_decodes_to_the_size_asked_with_its_line_in_its_colour():
    png = line_chart_png([("RSS", [Series("worker-0", [(0.0, 10.0), (60.0, 10.0)])], None)], "MINUTES", width=400)
    width, height, rows = decode(png)
    assert (width, height) == (400, 360)
    colour = bytes(PALETTE[0])
    line_rows = [y for y, row in enumerate(rows) if row.count(colour) > 100]  # a horizontal line at 10
    assert line_rows, "the series was not drawn"
    assert all(y < 360 - 50 for y in line_rows)  # above the x axis


def test_ticks_are_round_numbers_covering_the_range():
    assert ticks(0, 60) == [0, 20, 40, 60]
    assert ticks(-1.3, 7.2) == pytest.approx([-2, 0, 2, 4, 6, 8])
    assert ticks(565.2, 566.1) == pytest.approx([565.2, 565.4, 565.6, 565.8, 566.0, 566.2])


def test_every_glyph_is_7_rows_of_5():
    assert all(len(rows) == 7 and all(len(r) == 5 and set(r) <= {".", "#"} for r in rows) for rows in FONT.values())
    assert set("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ .,-+%:()/<>=_?") <= set(FONT)

"""Line charts as PNG files with the standard library alone (zlib + struct), for ``make soak``.

No plotting library is among our dependencies, and a soak's plot needs little: panels of
lines over a shared x axis, ticks at round numbers, a legend, an optional dashed goal
line and a shaded warm-up. Text uses a 5x7 bitmap font of upper-case letters, digits and
a few signs (drawn here, below), scaled 2x.

>>> png = line_chart_png([("RSS (MB)", [Series("worker-0", [(0, 560.0), (60, 566.0)])], None)], "MINUTES")
>>> png[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
True
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

# Each line: the character, then its 7 rows of 5 pixels, top to bottom.
_FONT_ROWS = """\
0 .###. #...# #..## #.#.# ##..# #...# .###.
1 ..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###.
2 .###. #...# ....# ...#. ..#.. .#... #####
3 ####. ....# ....# .###. ....# ....# ####.
4 ...#. ..##. .#.#. #..#. ##### ...#. ...#.
5 ##### #.... ####. ....# ....# #...# .###.
6 ..##. .#... #.... ####. #...# #...# .###.
7 ##### ....# ...#. ..#.. .#... .#... .#...
8 .###. #...# #...# .###. #...# #...# .###.
9 .###. #...# #...# .#### ....# ...#. .##..
A .###. #...# #...# ##### #...# #...# #...#
B ####. #...# #...# ####. #...# #...# ####.
C .###. #...# #.... #.... #.... #...# .###.
D ####. #...# #...# #...# #...# #...# ####.
E ##### #.... #.... ####. #.... #.... #####
F ##### #.... #.... ####. #.... #.... #....
G .###. #...# #.... #.### #...# #...# .####
H #...# #...# #...# ##### #...# #...# #...#
I .###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.
J ..### ...#. ...#. ...#. ...#. #..#. .##..
K #...# #..#. #.#.. ##... #.#.. #..#. #...#
L #.... #.... #.... #.... #.... #.... #####
M #...# ##.## #.#.# #.#.# #...# #...# #...#
N #...# #...# ##..# #.#.# #..## #...# #...#
O .###. #...# #...# #...# #...# #...# .###.
P ####. #...# #...# ####. #.... #.... #....
Q .###. #...# #...# #...# #.#.# #..#. .##.#
R ####. #...# #...# ####. #.#.. #..#. #...#
S .#### #.... #.... .###. ....# ....# ####.
T ##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..
U #...# #...# #...# #...# #...# #...# .###.
V #...# #...# #...# #...# #...# .#.#. ..#..
W #...# #...# #...# #.#.# #.#.# #.#.# .#.#.
X #...# #...# .#.#. ..#.. .#.#. #...# #...#
Y #...# #...# .#.#. ..#.. ..#.. ..#.. ..#..
Z ##### ....# ...#. ..#.. .#... #.... #####
  ..... ..... ..... ..... ..... ..... .....
. ..... ..... ..... ..... ..... .##.. .##..
, ..... ..... ..... ..... .##.. ..#.. .#...
- ..... ..... ..... ##### ..... ..... .....
+ ..... ..#.. ..#.. ##### ..#.. ..#.. .....
% ##... ##..# ...#. ..#.. .#... #..## ...##
: ..... .##.. .##.. ..... .##.. .##.. .....
( ...#. ..#.. .#... .#... .#... ..#.. ...#.
) .#... ..#.. ...#. ...#. ...#. ..#.. .#...
/ ..... ....# ...#. ..#.. .#... #.... .....
< ...#. ..#.. .#... #.... .#... ..#.. ...#.
> .#... ..#.. ...#. ....# ...#. ..#.. .#...
= ..... ..... ##### ..... ##### ..... .....
_ ..... ..... ..... ..... ..... ..... #####
? .###. #...# ....# ...#. ..#.. ..... ..#..
"""
FONT = {line[0]: line[2:].split() for line in _FONT_ROWS.splitlines()}
SCALE = 2
CHAR_W, CHAR_H = 6 * SCALE, 7 * SCALE  # advance (glyph + 1 px gap), height

Color = tuple[int, int, int]
PALETTE: list[Color] = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189), (140, 86, 75)]
BLACK, GREY, LIGHT, WHITE = (0, 0, 0), (150, 150, 150), (235, 235, 235), (255, 255, 255)


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i : i + 3] = bytes(color)

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        for y in range(max(y0, 0), min(y1, self.height)):
            for x in range(max(x0, 0), min(x1, self.width)):
                self.dot(x, y, color)

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color, width: int = 1, dash: int = 0) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for step in range(steps + 1):
            if dash and (step // dash) % 2:
                continue
            x, y = round(x0 + (x1 - x0) * step / steps), round(y0 + (y1 - y0) * step / steps)
            self.fill(x, y, x + width, y + width, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK) -> None:
        for char in text.upper():
            for row, bits in enumerate(FONT.get(char, FONT["?"])):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        self.fill(x + col * SCALE, y + row * SCALE, x + (col + 1) * SCALE, y + (row + 1) * SCALE, color)
            x += CHAR_W

    def png(self) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        row = self.width * 3
        raw = b"".join(b"\x00" + self.pixels[y * row : (y + 1) * row] for y in range(self.height))  # filter: none
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )


@dataclass(frozen=True)
class Axis:
    """Maps values in [low, high] linearly onto pixels [start, end]."""

    low: float
    high: float
    start: int
    end: int

    def __call__(self, value: float) -> int:
        return round(self.start + (value - self.low) / (self.high - self.low or 1) * (self.end - self.start))


def ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round numbers (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    raw = (high - low) / max(count - 1, 1) or 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step) + 1)]


def label(value: float, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{value:.{decimals}f}"


def line_chart_png(
    panels: Sequence[tuple[str, Sequence[Series], float | None]],
    x_label: str,
    shade_until: float | None = None,
    width: int = 1200,
    panel_height: int = 360,
) -> bytes:
    """Panels stacked over one x axis; each is (title, series, goal) where ``goal`` draws a dashed line."""
    left, right, top, bottom = 90, 200, 40, 50
    canvas = Canvas(width, len(panels) * panel_height)
    xs = [x for _, series, _ in panels for s in series for x, _ in s.points]
    x_ticks = ticks(min(xs, default=0.0), max(xs, default=1.0))
    x_low, x_high = x_ticks[0], x_ticks[-1]
    names = sorted({s.name for _, series, _ in panels for s in series})
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    for index, (title, series, goal) in enumerate(panels):
        y0 = index * panel_height
        plot_top, plot_bottom, plot_left, plot_right = y0 + top, y0 + panel_height - bottom, left, width - right
        ys = [y for s in series for _, y in s.points] + ([goal] if goal is not None else [])
        low, high = min(ys, default=0.0), max(ys, default=1.0)
        if goal is None:
            low = min(low, 0.0)  # absolute values: from zero, so the eye judges proportions right
        pad = (high - low) * 0.08 or 1.0
        y_ticks = ticks(low - (pad if goal is not None else 0), high + pad)
        y_low, y_high = y_ticks[0], y_ticks[-1]

        px = Axis(x_low, x_high, plot_left, plot_right)
        py = Axis(y_low, y_high, plot_bottom, plot_top)  # pixel rows grow downwards

        canvas.text(plot_left, y0 + 12, title)
        if shade_until is not None and shade_until > x_low:
            canvas.fill(plot_left, plot_top, px(min(shade_until, x_high)), plot_bottom, LIGHT)
            canvas.text(plot_left + 6, plot_top + 6, "WARM-UP", GREY)
        for y in y_ticks:
            canvas.line(plot_left, py(y), plot_right, py(y), LIGHT if y else GREY)
            text = label(y, y_ticks[1] - y_ticks[0])
            canvas.text(plot_left - 8 - len(text) * CHAR_W, py(y) - CHAR_H // 2, text)
        for x in x_ticks:
            canvas.line(px(x), plot_bottom, px(x), plot_bottom + 5, BLACK)
            text = label(x, x_ticks[1] - x_ticks[0])
            canvas.text(px(x) - len(text) * CHAR_W // 2, plot_bottom + 10, text)
        canvas.line(plot_left, plot_top, plot_left, plot_bottom, BLACK)
        canvas.line(plot_left, plot_bottom, plot_right, plot_bottom, BLACK)
        if goal is not None:
            canvas.line(plot_left, py(goal), plot_right, py(goal), BLACK, width=2, dash=8)
            canvas.text(plot_right - 8 * CHAR_W, py(goal) - CHAR_H - 4, f"GOAL {goal:g}%")
        for n, s in enumerate(series):
            points = [(px(x), py(y)) for x, y in s.points]
            for (ax, ay), (bx, by) in itertools.pairwise(points):
                canvas.line(ax, ay, bx, by, colors[s.name], width=2)
            canvas.fill(
                plot_right + 16, plot_top + 8 + n * 26, plot_right + 36, plot_top + 8 + n * 26 + CHAR_H, colors[s.name]
            )
            canvas.text(plot_right + 44, plot_top + 8 + n * 26, s.name)
        if index == len(panels) - 1:
            canvas.text((plot_left + plot_right - len(x_label) * CHAR_W) // 2, plot_bottom + 30, x_label)
    return canvas.png()

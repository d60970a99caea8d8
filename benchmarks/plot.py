"""A dependency-free PNG bar chart of the ratios (zlib + struct, a built-in 5x7 bitmap font).

One horizontal bar per workload (and the geomean) on a log-scale axis of pjrtkit_s / xla_s:
green when the target is met, red when not, grey when there is no timing; a black tick across
each row marks that row's target, a dark line marks 1x (parity with XLA). Lower is better.
Written by hand rather than with matplotlib so the suite needs nothing beyond the project's
pinned dependencies.
"""
from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

_GLYPHS = {
    "0": "01110 10001 10011 10101 11001 10001 01110", "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111", "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010", "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110", "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110", "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001", "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110", "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111", "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111", "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110", "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001", "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001", "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110", "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101", "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110", "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110", "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010", "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 01010 00100 00100 00100 00100", "Z": "11111 00001 00010 00100 01000 10000 11111",
    ".": "00000 00000 00000 00000 00000 01100 01100", "_": "00000 00000 00000 00000 00000 00000 11111",
    "-": "00000 00000 00000 11111 00000 00000 00000", ":": "00000 01100 01100 00000 01100 01100 00000",
    "/": "00001 00010 00010 00100 01000 01000 10000", "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000", "=": "00000 00000 11111 00000 11111 00000 00000",
    "<": "00010 00100 01000 10000 01000 00100 00010", ">": "01000 00100 00010 00001 00010 00100 01000",
    "%": "11000 11001 00010 00100 01000 10011 00011", ",": "00000 00000 00000 00000 01100 00100 01000",
    "+": "00000 00100 00100 11111 00100 00100 00000", "?": "01110 10001 00001 00010 00100 00000 00100",
    "|": "00100 00100 00100 00100 00100 00100 00100", " ": "00000 00000 00000 00000 00000 00000 00000",
}
_FONT = {c: [[bit == "1" for bit in row] for row in rows.split()] for c, rows in _GLYPHS.items()}

WHITE, BLACK, GRID, DARK = (255, 255, 255), (0, 0, 0), (225, 225, 225), (90, 90, 90)
GREEN, RED, GREY = (60, 170, 90), (215, 70, 60), (170, 170, 170)


class Canvas:
    def __init__(self, width: int, height: int):
        self.width, self.height = width, height
        self.rows = [bytearray(WHITE * width) for _ in range(height)]

    def rect(self, x0: int, y0: int, x1: int, y1: int, color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        if x1 <= x0:
            return
        span = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            self.rows[y][3 * x0:3 * x1] = span

    def text(self, x: int, y: int, s: str, color=BLACK, scale: int = 2) -> None:
        for ch in s.upper():
            glyph = _FONT.get(ch, _FONT["?"])
            for gy, row in enumerate(glyph):
                for gx, on in enumerate(row):
                    if on:
                        self.rect(x + gx * scale, y + gy * scale, x + (gx + 1) * scale,
                                  y + (gy + 1) * scale, color)
            x += 6 * scale

    @staticmethod
    def text_width(s: str, scale: int = 2) -> int:
        return 6 * scale * len(s)

    def png(self) -> bytes:
        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        raw = b"".join(b"\x00" + bytes(row) for row in self.rows)
        return (b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def render(rows: list[tuple[str, float | None, float]], title: str) -> bytes:
    """PNG of ``rows`` = [(label, ratio or None, target)] on a log axis."""
    values = [v for _, v, _ in rows if v] + [t for _, _, t in rows if t] + [1.0]
    lo = 10 ** math.floor(math.log10(min(values) / 1.2))
    hi = 10 ** math.ceil(math.log10(max(values) * 1.6))
    left, right, top, row_h, bottom = 250, 110, 70, 34, 70  # right: room for "1234.56X"
    width = 1060
    height = top + row_h * len(rows) + bottom
    c = Canvas(width, height)
    plot_w = width - left - right

    def x_of(v: float) -> int:
        return left + round(plot_w * (math.log10(v) - math.log10(lo))
                            / (math.log10(hi) - math.log10(lo)))

    c.text(left, 14, title, scale=2)
    c.text(left, 38, "PJRTKIT / XLA TIME, LOG SCALE, LOWER IS BETTER.  | = TARGET", DARK, 1)
    y_end = top + row_h * len(rows)
    decade = lo
    while decade <= hi * 1.0001:
        x = x_of(decade)
        c.rect(x, top - 4, x + 1, y_end, GRID)
        label = f"{decade:g}X"
        c.text(x - c.text_width(label) // 2, y_end + 10, label, DARK)
        decade *= 10
    for i, (label, ratio, target) in enumerate(rows):
        y = top + i * row_h
        c.text(left - 12 - c.text_width(label), y + 10, label)
        if ratio is None:
            c.rect(left, y + 8, left + 30, y + row_h - 8, GREY)
            c.text(left + 40, y + 10, "NO DATA", DARK)
        else:
            color = GREY if target is None else GREEN if ratio <= target else RED
            x = x_of(ratio)
            c.rect(left, y + 7, max(x, left + 2), y + row_h - 7, color)
            c.text(max(x, left + 2) + 8, y + 10, f"{ratio:.2f}X", DARK)
        if target is not None:  # a workload reported without a bar has no tick
            tx = x_of(target)
            c.rect(tx - 1, y + 2, tx + 2, y + row_h - 2, BLACK)
    one = x_of(1.0)
    c.rect(one, top - 4, one + 2, y_end, DARK)
    c.rect(left, y_end, width - right, y_end + 1, DARK)
    c.text(left, y_end + 38, "GREEN: TARGET MET   RED: NOT MET   GREY: NO TIMING", DARK, 1)
    return c.png()


def write(path: str, rows: list[tuple[str, float | None, float]], title: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(render(rows, title))

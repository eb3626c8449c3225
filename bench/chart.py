"""A small PNG writer for the benchmark summary: filled rectangles, lines and text in a built-in
5x7 bitmap font, encoded with zlib and struct (no plotting library is a dependency).

``ratio_chart(rows)`` draws the summary: one horizontal bar per figure, on a log2 scale
centred on 1 (a bar to the right: rafka better; to the left: the other side better), with the
ratio and the absolute figures written beside it.
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Iterable, Sequence

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (150, 150, 150)
LIGHT: Color = (225, 225, 225)
GREEN: Color = (46, 139, 87)
RED: Color = (205, 92, 60)

GLYPH_W, GLYPH_H = 5, 7
# 5x7 glyphs, one int per row, bit 4 the leftmost column. Lower case is drawn as upper case;
# a character with no glyph is drawn as "?".
FONT: dict[str, tuple[int, ...]] = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E),
    "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F),
    "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02),
    "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E),
    "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E),
    "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "A": (0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11),
    "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E),
    "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F),
    "F": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
    "G": (0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F),
    "H": (0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11),
    "I": (0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "J": (0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C),
    "K": (0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11),
    "L": (0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F),
    "M": (0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11),
    "N": (0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11),
    "O": (0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "P": (0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10),
    "Q": (0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D),
    "R": (0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11),
    "S": (0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E),
    "T": (0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04),
    "U": (0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E),
    "V": (0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04),
    "W": (0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A),
    "X": (0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11),
    "Y": (0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04),
    "Z": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F),
    " ": (0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00),
    ".": (0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C),
    ",": (0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08),
    ":": (0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00),
    ";": (0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x04, 0x08),
    "-": (0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00),
    "+": (0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00),
    "/": (0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00),
    "=": (0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00),
    "(": (0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02),
    ")": (0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08),
    "[": (0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E),
    "]": (0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E),
    "%": (0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03),
    "_": (0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F),
    "<": (0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02),
    ">": (0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08),
    "*": (0x00, 0x04, 0x15, 0x0E, 0x15, 0x04, 0x00),
    "'": (0x0C, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00),
    "?": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04),
    "!": (0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04),
    "#": (0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A),
}


def glyph(char: str) -> tuple[int, ...]:
    if char == "µ":
        char = "u"
    return FONT.get(char.upper(), FONT["?"])


def text_width(text: str, scale: int = 1) -> int:
    """Pixels ``text`` takes: 5 columns per character and 1 between characters, times scale."""
    return max(0, len(text) * (GLYPH_W + 1) - 1) * scale


def text_height(scale: int = 1) -> int:
    return GLYPH_H * scale


class Canvas:
    """An RGB image in memory, white unless drawn on; coordinates clip to the image."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"an image needs a positive size, not {width}x{height}")
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def pixel(self, x: int, y: int) -> Color:
        i = (y * self.width + x) * 3
        return tuple(self.pixels[i : i + 3])  # type: ignore[return-value]

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill the pixels x0 <= x < x1, y0 <= y < y1."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        if x0 >= x1 or y0 >= y1:
            return
        run = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + len(run)] = run

    def hline(self, x0: int, x1: int, y: int, color: Color, thickness: int = 1) -> None:
        self.rect(x0, y, x1 + 1, y + thickness, color)

    def vline(self, x: int, y0: int, y1: int, color: Color, thickness: int = 1) -> None:
        self.rect(x, y0, x + thickness, y1 + 1, color)

    def text(self, x: int, y: int, text: str, color: Color = BLACK, scale: int = 1) -> int:
        """Draw ``text`` with its top-left corner at (x, y); answers its width in pixels."""
        for n, char in enumerate(text):
            left = x + n * (GLYPH_W + 1) * scale
            for row, bits in enumerate(glyph(char)):
                for col in range(GLYPH_W):
                    if bits & (0x10 >> col):
                        top = y + row * scale
                        self.rect(left + col * scale, top, left + (col + 1) * scale,
                                  top + scale, color)  # fmt: skip
        return text_width(text, scale)

    def png(self) -> bytes:
        stride = self.width * 3
        rows = (self.pixels[y * stride : (y + 1) * stride] for y in range(self.height))
        return encode_png(self.width, self.height, rows)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))  # fmt: skip


def encode_png(width: int, height: int, rows: Iterable[bytes]) -> bytes:
    """A PNG file of 8-bit RGB ``rows`` (each ``3 * width`` bytes, top to bottom)."""
    raw = bytearray()
    count = 0
    for row in rows:
        if len(row) != 3 * width:
            raise ValueError(f"row {count} has {len(row)} bytes, expected {3 * width}")
        raw += b"\x00"  # filter type 0 (none) for every scanline
        raw += row
        count += 1
    if count != height:
        raise ValueError(f"{count} rows for an image {height} high")
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (PNG_SIGNATURE + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(bytes(raw), 9))
            + _chunk(b"IEND", b""))  # fmt: skip


# -- the summary chart -------------------------------------------------------------------------

SCALE = 2  # font scale
CHAR = (GLYPH_W + 1) * SCALE
ROW_H = 34
BAR_H = 18
MARGIN = 16
PLOT_W = 480


def _log_span(ratios: Sequence[float]) -> int:
    """Half the width of the log2 axis, in whole powers of two (at least 1: 0.5x .. 2x)."""
    widest = max((abs(math.log2(r)) for r in ratios if r and r > 0), default=0.0)
    return max(1, math.ceil(widest - 1e-9))


def _tick_label(power: int) -> str:
    return f"{2**power:g}X" if power >= 0 else f"1/{2**-power:g}X"


def ratio_chart(rows: Sequence[dict], title: str = "", note: str = "") -> bytes:
    """The PNG of a bar per row. A row: ``label`` (str), ``ratio`` (float or None: no bar) and
    ``detail`` (str, written after the bar, e.g. the absolute figures)."""
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    span = _log_span(ratios)
    label_w = max([text_width(r["label"], SCALE) for r in rows] + [CHAR * 10])
    detail_w = max([text_width(r.get("detail", ""), SCALE) for r in rows] + [CHAR * 10])
    plot_x = MARGIN + label_w + MARGIN
    width = plot_x + PLOT_W + MARGIN + CHAR * 8 + detail_w + MARGIN
    header_h = (ROW_H if title else 0) + (ROW_H if note else 0)
    plot_y = MARGIN + header_h
    height = plot_y + max(1, len(rows)) * ROW_H + ROW_H + MARGIN
    canvas = Canvas(width, height)

    y = MARGIN
    if title:
        canvas.text(MARGIN, y, title, BLACK, SCALE)
        y += ROW_H
    if note:
        canvas.text(MARGIN, y, note, GREY, SCALE)

    def x_of(ratio: float) -> int:
        power = max(-span, min(span, math.log2(ratio)))
        return plot_x + round((power + span) / (2 * span) * PLOT_W)

    bottom = plot_y + max(1, len(rows)) * ROW_H
    # Label every step-th power of two, so that the labels do not run into each other.
    widest = max(text_width(_tick_label(p), SCALE) for p in (-span, span))
    step = max(1, math.ceil((widest + CHAR) / (PLOT_W / (2 * span))))
    for power in range(-span, span + 1):  # grid and tick labels
        x = x_of(2.0**power)
        canvas.vline(x, plot_y, bottom, BLACK if power == 0 else LIGHT, 2 if power == 0 else 1)
        if power % step == 0:
            label = _tick_label(power)
            canvas.text(x - text_width(label, SCALE) // 2, bottom + 8, label, GREY, SCALE)
    canvas.hline(plot_x, plot_x + PLOT_W, bottom, BLACK)

    centre = x_of(1.0)
    for n, row in enumerate(rows):
        top = plot_y + n * ROW_H
        text_y = top + (ROW_H - text_height(SCALE)) // 2
        canvas.text(MARGIN + label_w - text_width(row["label"], SCALE), text_y, row["label"],
                    BLACK, SCALE)  # fmt: skip
        ratio = row.get("ratio")
        bar_top = top + (ROW_H - BAR_H) // 2
        if ratio and ratio > 0:
            end = x_of(ratio)
            color = GREEN if ratio >= 1 else RED
            canvas.rect(min(centre, end), bar_top, max(centre, end) + 1, bar_top + BAR_H, color)
            value = f"{ratio:.2f}X" if ratio < 100 else f"{ratio:,.0f}X"
        else:
            value = "-"
        canvas.text(plot_x + PLOT_W + MARGIN, text_y, value, BLACK, SCALE)
        canvas.text(plot_x + PLOT_W + MARGIN + CHAR * 8, text_y, row.get("detail", ""),
                    GREY, SCALE)  # fmt: skip
    return canvas.png()


def write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)

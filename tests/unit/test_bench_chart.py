"""The benchmark's PNG writer (bench/chart.py): the files it makes are valid PNGs (signature,
chunks, CRCs, size, scanlines) and show what was drawn; and the harness's summary chart."""

from __future__ import annotations

import struct
import zlib

import pytest

from bench import chart


def read_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Check a PNG file chunk by chunk; answers (width, height, RGB rows)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        pos += 12 + length
    assert pos == len(data)
    kinds = [kind for kind, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    assert chunks[-1][1] == b""
    width, height, depth, color, compression, filtering, interlace = struct.unpack(
        ">IIBBBBB", chunks[0][1]
    )
    assert (depth, color, compression, filtering, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    stride = 1 + 3 * width
    assert len(raw) == height * stride
    rows = []
    for y in range(height):
        line = raw[y * stride : (y + 1) * stride]
        assert line[0] == 0  # filter type none
        rows.append(line[1:])
    return width, height, rows


def pixel(rows: list[bytes], x: int, y: int) -> tuple[int, int, int]:
    return tuple(rows[y][3 * x : 3 * x + 3])


def test_encode_png_makes_a_valid_file_of_the_given_rows():
    rows = [bytes([0, 40 * y, 7]) for y in range(3)]  # one pixel wide, three high
    width, height, decoded = read_png(chart.encode_png(1, 3, rows))
    assert (width, height) == (1, 3)
    assert decoded == rows


def test_encode_png_refuses_rows_of_the_wrong_size_or_number():
    with pytest.raises(ValueError):
        chart.encode_png(2, 1, [b"\x00" * 5])
    with pytest.raises(ValueError):
        chart.encode_png(1, 2, [b"\x00" * 3])


def test_canvas_draws_rectangles_clipped_to_the_image():
    canvas = chart.Canvas(10, 6)
    canvas.rect(2, 1, 5, 3, chart.GREEN)
    canvas.rect(8, 4, 20, 20, chart.RED)  # runs off the image
    canvas.rect(-5, -5, 0, 0, chart.BLACK)  # entirely outside: nothing
    width, height, rows = read_png(canvas.png())
    assert (width, height) == (10, 6)
    assert pixel(rows, 2, 1) == chart.GREEN and pixel(rows, 4, 2) == chart.GREEN
    assert pixel(rows, 5, 2) == chart.WHITE and pixel(rows, 2, 3) == chart.WHITE
    assert pixel(rows, 9, 5) == chart.RED and pixel(rows, 7, 5) == chart.WHITE
    assert pixel(rows, 0, 0) == chart.WHITE


def test_text_draws_its_glyphs_inside_its_box():
    canvas = chart.Canvas(60, 20)
    drawn = canvas.text(3, 4, "1.5x", chart.BLACK, scale=2)
    assert drawn == chart.text_width("1.5x", 2) == (4 * 6 - 1) * 2
    inked = {(x, y) for y in range(20) for x in range(60) if canvas.pixel(x, y) == chart.BLACK}
    assert inked
    assert all(3 <= x < 3 + drawn and 4 <= y < 4 + chart.text_height(2) for x, y in inked)
    # The "1" glyph's top row is one pixel at its third column (scaled by 2).
    assert canvas.pixel(3 + 2 * 2, 4) == chart.BLACK and canvas.pixel(3, 4) == chart.WHITE


def test_characters_without_a_glyph_are_drawn_as_a_question_mark():
    assert chart.glyph("~") == chart.FONT["?"]
    assert chart.glyph("a") == chart.FONT["A"]
    assert all(len(rows) == chart.GLYPH_H and max(rows) < 32 for rows in chart.FONT.values())


def test_ratio_chart_is_a_png_with_a_bar_per_row():
    rows = [
        {"label": "produce per record", "ratio": 1.5, "detail": "rafka 1.5M vs peer 1M"},
        {"label": "latency p99", "ratio": 0.25, "detail": "rafka 4 vs peer 1 ms"},
        {"label": "consume bulk", "ratio": 300.0, "detail": "far beyond the axis"},
        {"label": "failover", "ratio": None, "detail": "rafka 1.7 s"},
    ]
    width, height, decoded = read_png(chart.ratio_chart(rows, "title", "a note"))
    assert height >= len(rows) * chart.ROW_H
    assert width > chart.PLOT_W
    colors = {pixel(decoded, x, y) for y in range(height) for x in range(0, width, 3)}
    assert chart.GREEN in colors and chart.RED in colors  # a bar each way from 1x


def test_ratio_chart_of_no_rows_is_still_a_png():
    width, height, _ = read_png(chart.ratio_chart([]))
    assert width > 0 and height > 0


def test_the_harness_summary_chart(tmp_path):
    from bench import harness

    row = harness.row("per record", "records/s", 2.0e6, peer=1.0e6)
    slower = harness.row("p99", "ms", 4.0, peer=2.0, higher_is_better=False)
    alone = harness.row("first ack", "s", 1.7)
    assert row["ratio"] == 2.0 and slower["ratio"] == 0.5 and alone["ratio"] is None
    summary = {
        "machine": {"cpus": 2, "time": "now"},
        "tiny": True,
        "workloads": {
            "produce": {"status": "ok", "rows": [row]},
            "latency": {"status": "ok", "rows": [slower]},
            "failover": {"status": "ok", "rows": [alone]},
            "group": {"status": "error", "error": "boom", "rows": []},
        },
    }
    path = tmp_path / "summary.png"
    harness.write_chart(summary, path)
    width, height, _ = read_png(path.read_bytes())
    assert height >= 4 * chart.ROW_H


def test_the_harness_resolves_names_and_aliases_in_its_order():
    from bench import harness

    assert harness.resolve(["failover", "produce"]) == ["produce", "failover"]
    assert harness.resolve(["clients", "groups"]) == ["produce", "consume", "group"]
    assert harness.resolve([]) == list(harness.WORKLOADS)
    with pytest.raises(ValueError):
        harness.resolve(["nope"])

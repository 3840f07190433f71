"""The overview's SVG charts keep every label inside the picture, whatever the number of points and values."""

from __future__ import annotations

import re

import pytest

from opsboard import charts

CHAR = 6.0  # px per character at the 10 px tick font (digits are about 5.6 px): a generous estimate
TEXT = re.compile(r'<text x="([\d.]+)" y="([\d.]+)" class="tick"(?: text-anchor="(\w+)")?>([^<]*)</text>')


def extents(svg: str) -> list[tuple[str, float, float, float]]:
    """(label, left, right, baseline) of every label of a chart."""
    out = []
    for x, y, anchor, text in TEXT.findall(svg):
        x, width = float(x), len(text.replace("&lt;", "<").replace("&amp;", "&")) * CHAR
        left = {"middle": x - width / 2, "end": x - width}.get(anchor, x)
        out.append((text, left, left + width, float(y)))
    return out


def series(n: int, labels, peak: float) -> list[dict]:
    return [{"label": labels(i), "requests": round(peak * (i + 1) / n), "failures": i % 3,
             "p95_ms": round(peak * (i + 1) / n)} for i in range(n)]


CASES = {
    "7 days": series(7, lambda i: f"03-{i + 4:02d}", 12_345),
    "24 hours": series(24, lambda i: f"{i:02d}:00", 2_500),
    "30 days": series(30, lambda i: f"{(i // 28) + 2:02d}-{i % 28 + 1:02d}", 123_456),
    "one point": series(1, lambda i: "03-10", 40),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("kind", ["bars", "line"])
def test_every_label_fits_inside_the_chart(name, kind):
    points = CASES[name]
    svg = (charts.bars(points, value="requests", overlay="failures", label="label", title="t") if kind == "bars"
           else charts.line(points, value="p95_ms", label="label", title="t"))

    labels = extents(svg)

    assert labels, svg
    outside = [(text, left, right, y) for text, left, right, y in labels
               if left < 0 or right > charts.WIDTH or y - 10 < 0 or y > charts.HEIGHT]
    assert outside == []
    scale = [label for label in labels if label[3] < charts.HEIGHT - charts.BOTTOM]  # the peak and the 0
    assert scale and all(right <= charts.LEFT for _, _, right, _ in scale)  # left of the plot, never over it
    assert points[0]["label"] in {text for text, *_ in labels}  # the first x label is drawn


def test_the_scale_shows_the_peak_with_separators_and_the_unit():
    svg = charts.line(CASES["7 days"], value="p95_ms", label="label", title="p95")

    assert ">12,345<" in svg and ">ms<" in svg and ">0<" in svg

"""Small inline SVG charts for the ops pages (no chart library, no CDN). Every label is escaped.

The plot sits inside margins that hold its labels: the scale on the left (right-aligned against the plot),
the x labels below (centred on their point), and half a label's width on the right, so the first and last
labels are never cut off by the edge of the picture.
"""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from opsboard.formatting import count

WIDTH, HEIGHT = 720, 160
LEFT, RIGHT, TOP, BOTTOM = 64, 24, 14, 22  # margins (px): the scale, half an x label, the top label, x labels
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
TICKS = 8  # about this many x labels


def _n(value: float) -> str:
    return f"{value:.1f}"


def _y(value: float, peak: float) -> float:
    return TOP + PLOT_H - value / peak * PLOT_H


def _frame(title: str, peak: float, unit: str, body: SafeString, ticks: SafeString) -> SafeString:
    """The picture: the scale (the peak at the top, its unit under it, 0 at the baseline), the baseline, the plot
    and the x labels."""
    return format_html(
        '<svg viewBox="0 0 {} {}" role="img" aria-label="{}" class="chart">'
        '<text x="{}" y="{}" class="tick" text-anchor="end">{}</text>'
        '<text x="{}" y="{}" class="tick" text-anchor="end">{}</text>'
        '<text x="{}" y="{}" class="tick" text-anchor="end">0</text>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="axis"/>{}{}</svg>',
        WIDTH, HEIGHT, title, LEFT - 4, TOP + 4, count(peak), LEFT - 4, TOP + 16, unit, LEFT - 4, TOP + PLOT_H,
        LEFT, _n(TOP + PLOT_H), WIDTH - RIGHT, _n(TOP + PLOT_H), body, ticks)


def _ticks(points: list[dict], label: str, x_of) -> SafeString:
    """About TICKS labels along the x axis, each centred under its point."""
    every = max(1, -(-len(points) // TICKS))
    return format_html_join("", '<text x="{}" y="{}" class="tick" text-anchor="middle">{}</text>',
                            ((_n(x_of(n)), HEIGHT - 6, p[label]) for n, p in enumerate(points) if n % every == 0))


def bars(points: list[dict], *, value: str, overlay: str | None = None, label: str, title: str) -> SafeString:
    """A bar per point (`value`), with an optional darker bar (`overlay`, e.g. failures) drawn over it."""
    peak = max([p[value] or 0 for p in points] + [1])
    step = PLOT_W / max(len(points), 1)
    bar = max(step - 2, 1)
    parts = []
    for n, point in enumerate(points):
        x = LEFT + n * step + 1
        height = (point[value] or 0) / peak * PLOT_H
        parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" class="bar">'
                                 "<title>{}: {} {}</title></rect>", _n(x), _n(TOP + PLOT_H - height), _n(bar),
                                 _n(height), point[label], count(point[value] or 0), value))
        if overlay and point[overlay]:
            top = point[overlay] / peak * PLOT_H
            parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" class="overlay">'
                                     "<title>{}: {} {}</title></rect>", _n(x), _n(TOP + PLOT_H - top), _n(bar),
                                     _n(top), point[label], count(point[overlay]), overlay))
    return _frame(title, peak, value, SafeString("".join(parts)),
                  _ticks(points, label, lambda n: LEFT + (n + 0.5) * step))


def line(points: list[dict], *, value: str, label: str, title: str, unit: str = "ms") -> SafeString:
    """A polyline of `value` over the points (None values leave a gap)."""
    values = [p[value] for p in points]
    peak = max([v for v in values if v is not None] + [1])
    step = PLOT_W / max(len(points) - 1, 1)
    x_of = (lambda n: LEFT + n * step) if len(points) > 1 else (lambda n: LEFT + PLOT_W / 2)
    segments, current = [], []
    for n, v in enumerate(values):
        if v is None:
            if current:
                segments.append(current)
            current = []
            continue
        current.append((x_of(n), _y(v, peak)))
    if current:
        segments.append(current)
    polylines = format_html_join("", '<polyline points="{}" class="line"/>',
                                 ((" ".join(f"{x:.1f},{y:.1f}" for x, y in seg),) for seg in segments if len(seg) > 1))
    dots = format_html_join("", '<circle cx="{}" cy="{}" r="3" class="dot"/>',
                            ((_n(seg[0][0]), _n(seg[0][1])) for seg in segments if len(seg) == 1))
    return _frame(title, peak, unit, SafeString(polylines + dots), _ticks(points, label, x_of))

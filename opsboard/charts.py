"""Small inline SVG charts for the ops pages (no chart library, no CDN). Every label is escaped."""

from __future__ import annotations

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT, PAD = 720, 160, 28


def _n(value: float) -> str:
    return f"{value:.1f}"


def _ticks(points: list[dict], label: str, step: float) -> SafeString:
    """About eight labels along the x axis."""
    every = max(1, len(points) // 8)
    return format_html_join("", '<text x="{}" y="{}" class="tick">{}</text>',
                            ((_n(PAD + n * step), HEIGHT - 8, p[label])
                             for n, p in enumerate(points) if n % every == 0))


def bars(points: list[dict], *, value: str, overlay: str | None = None, label: str, title: str) -> SafeString:
    """A bar per point (`value`), with an optional darker bar (`overlay`, e.g. failures) drawn over it."""
    peak = max([p[value] or 0 for p in points] + [1])
    step = (WIDTH - PAD) / max(len(points), 1)
    bar = max(step - 2, 1)
    parts = []
    for n, point in enumerate(points):
        x = PAD + n * step
        height = (point[value] or 0) / peak * (HEIGHT - PAD)
        parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" class="bar">'
                                 "<title>{}: {} {}</title></rect>", _n(x), _n(HEIGHT - PAD - height), _n(bar),
                                 _n(height), point[label], point[value] or 0, value))
        if overlay and point[overlay]:
            top = point[overlay] / peak * (HEIGHT - PAD)
            parts.append(format_html('<rect x="{}" y="{}" width="{}" height="{}" class="overlay">'
                                     "<title>{}: {} {}</title></rect>", _n(x), _n(HEIGHT - PAD - top), _n(bar),
                                     _n(top), point[label], point[overlay], overlay))
    return format_html('<svg viewBox="0 0 {} {}" role="img" aria-label="{}" class="chart">'
                       '<text x="0" y="12" class="tick">{}</text>{}{}</svg>',
                       WIDTH, HEIGHT, title, peak, SafeString("".join(parts)), _ticks(points, label, step))


def line(points: list[dict], *, value: str, label: str, title: str) -> SafeString:
    """A polyline of `value` over the points (None values leave a gap)."""
    values = [p[value] for p in points]
    peak = max([v for v in values if v is not None] + [1])
    step = (WIDTH - PAD) / max(len(points) - 1, 1)
    segments, current = [], []
    for n, v in enumerate(values):
        if v is None:
            if current:
                segments.append(current)
            current = []
            continue
        current.append((PAD + n * step, HEIGHT - PAD - v / peak * (HEIGHT - PAD)))
    if current:
        segments.append(current)
    polylines = format_html_join("", '<polyline points="{}" class="line"/>',
                                 ((" ".join(f"{x:.1f},{y:.1f}" for x, y in seg),) for seg in segments if len(seg) > 1))
    dots = format_html_join("", '<circle cx="{}" cy="{}" r="3" class="dot"/>',
                            ((_n(seg[0][0]), _n(seg[0][1])) for seg in segments if len(seg) == 1))
    return format_html('<svg viewBox="0 0 {} {}" role="img" aria-label="{}" class="chart">'
                       '<text x="0" y="12" class="tick">≤{} ms</text>{}{}{}</svg>',
                       WIDTH, HEIGHT, title, peak, polylines, dots, _ticks(points, label, step))

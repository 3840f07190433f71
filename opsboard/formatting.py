"""Numbers as the ops pages and alert messages show them: counts and tokens with thousands separators,
milliseconds as whole numbers, rates as percentages with one decimal. A missing value is a dash, never "None"
or a raw float."""

from __future__ import annotations

from django.utils import timezone
from django.utils.dateparse import parse_datetime

MISSING = "—"


def _number(value) -> float | None:
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def count(value) -> str:
    """12345 -> "12,345"."""
    number = _number(value)
    return MISSING if number is None else f"{round(number):,}"


def ms(value) -> str:
    """Milliseconds as a whole number: 2499.6 -> "2,500"; under a millisecond (but not zero) -> "<1"."""
    number = _number(value)
    if number is None:
        return MISSING
    return "<1" if 0 < number < 0.5 else f"{round(number):,}"


def pct(value) -> str:
    """A rate (a fraction of 1) as a percentage with one decimal: 0.6819999999999999 -> "68.2 %"."""
    number = _number(value)
    return MISSING if number is None else f"{number * 100:.1f} %"


def moment(value) -> str:
    """An ISO 8601 time (as the JSON of the gaps gives it) in the site's time zone: "2026-12-05 20:57"."""
    parsed = parse_datetime(value) if isinstance(value, str) else value
    if parsed is None:
        return MISSING
    return timezone.localtime(parsed).strftime("%Y-%m-%d %H:%M") if timezone.is_aware(parsed) else \
        parsed.strftime("%Y-%m-%d %H:%M")

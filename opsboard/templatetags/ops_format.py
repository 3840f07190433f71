"""The ops pages' number filters: `{{ n|count }}`, `{{ latency|ms }}`, `{{ rate|pct }}` (see opsboard.formatting)."""

from django import template

from opsboard.formatting import count, ms, pct

register = template.Library()
register.filter("count", count)
register.filter("ms", ms)
register.filter("pct", pct)

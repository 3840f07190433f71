"""The ops pages' filters: `{{ n|count }}`, `{{ latency|ms }}`, `{{ rate|pct }}`, `{{ iso|moment }}` (see
opsboard.formatting)."""

from django import template

from opsboard.formatting import count, moment, ms, pct

register = template.Library()
register.filter("count", count)
register.filter("ms", ms)
register.filter("pct", pct)
register.filter("moment", moment)

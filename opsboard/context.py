"""Firing alerts on every ops page (the ops site and the eval center), one small query, only under /ops/."""

from opsboard.models import AlertEvent


def ops_alerts(request) -> dict:
    if not request.path.startswith("/ops/") or not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"ops_alerts": list(AlertEvent.objects.filter(resolved_at__isnull=True).order_by("-fired_at")[:10])}

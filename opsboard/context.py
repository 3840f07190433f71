"""Firing alerts on every ops page (the ops site and the eval center), one small query, only under /ops/."""

from django.conf import settings

from opsboard.models import AlertEvent


def ops_alerts(request) -> dict:
    user = getattr(request, "user", None)
    if not request.path.startswith("/ops/") or user is None or not user.is_authenticated:
        return {}
    groups = [settings.RAG_OPS_GROUP, settings.RAG_QA_GROUP]
    if not user.is_superuser and not user.groups.filter(name__in=groups).exists():
        return {}
    return {"ops_alerts": list(AlertEvent.objects.filter(resolved_at__isnull=True).order_by("-fired_at")[:10])}

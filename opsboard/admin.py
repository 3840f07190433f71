from django.contrib import admin

from infra.admin_readonly import ReadOnlyAdmin
from opsboard.models import AlertEvent, DailyReport


@admin.register(AlertEvent)
class AlertEventAdmin(ReadOnlyAdmin):
    """Alert history, written by the alert job only."""

    list_display = ("rule", "message", "fired_at", "resolved_at", "delivered", "delivery_error")
    list_filter = ("rule", "delivered")
    readonly_fields = [f.name for f in AlertEvent._meta.fields]


@admin.register(DailyReport)
class DailyReportAdmin(ReadOnlyAdmin):
    list_display = ("day", "generated_at")
    readonly_fields = ("day", "generated_at", "summary")
    exclude = ("html",)


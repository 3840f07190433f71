from django.contrib import admin

from opsboard.models import AlertEvent, DailyReport


@admin.register(AlertEvent)
class AlertEventAdmin(admin.ModelAdmin):
    """Alert history, written by the alert job only."""

    list_display = ("rule", "message", "fired_at", "resolved_at", "delivered", "delivery_error")
    list_filter = ("rule", "delivered")
    readonly_fields = [f.name for f in AlertEvent._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(DailyReport)
class DailyReportAdmin(admin.ModelAdmin):
    list_display = ("day", "generated_at")
    readonly_fields = ("day", "generated_at", "summary")
    exclude = ("html",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

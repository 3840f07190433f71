"""An admin for rows only the product writes (usage counters, eval runs, alerts, reports): list and read."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

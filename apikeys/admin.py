from django.contrib import admin, messages

from apikeys.models import ApiKey
from apikeys.services import api_key_issue, api_key_revoke, api_key_rotate


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created here; the whole key is shown once, in the message after saving."""

    list_display = ("prefix", "name", "owner", "created_at", "last_used_at", "state", "daily_quota",
                    "rate_limit_per_minute")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "owner__username")
    fields = ("name", "owner", "expires_at", "daily_quota", "rate_limit_per_minute", "prefix", "created_at",
              "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke", "rotate"]

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        record, key = api_key_issue(owner=obj.owner, name=obj.name, expires_at=obj.expires_at,
                                    daily_quota=obj.daily_quota, rate_limit_per_minute=obj.rate_limit_per_minute)
        obj.pk = record.pk
        obj.prefix = record.prefix
        messages.warning(request, f"Copy this key now; it is not stored and will not be shown again: {key}")

    @admin.action(description="Revoke the selected keys (they stop working at once)")
    def revoke(self, request, queryset):
        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")

    @admin.action(description="Rotate: revoke and issue a replacement (shown once)")
    def rotate(self, request, queryset):
        for key in queryset:
            new, plaintext = api_key_rotate(key=key)
            messages.warning(request, f"{key.prefix} replaced by {new.prefix}. Copy it now: {plaintext}")

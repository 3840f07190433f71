import datetime

from django.contrib import admin
from django.db.models import Q, Sum
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers

from apikeys.models import ApiKey, ApiKeyUsage
from infra.admin_readonly import ReadOnlyAdmin


class ShownOnce(str):
    """A new key: rendered whole on its page, masked in any repr (a template's DEBUG log dumps its context)."""

    def __repr__(self) -> str:
        return f"'{self.partition('_')[0]}_…'"


# The services are imported where they are used: every process imports the admin modules when Django
# starts (admin autodiscovery), and most never act on a key here.


class UsageInline(admin.TabularInline):
    """The last two weeks of usage, per day and tool (read-only)."""

    model = ApiKeyUsage
    fields = readonly_fields = ("day", "tool", "calls", "failures", "prompt_tokens", "completion_tokens")
    extra = 0
    can_delete = False
    max_num = 0
    verbose_name_plural = "usage (last 14 days)"

    def get_queryset(self, request):
        since = timezone.localdate() - datetime.timedelta(days=14)
        return super().get_queryset(request).filter(day__gt=since)


@admin.register(ApiKeyUsage)
class ApiKeyUsageAdmin(ReadOnlyAdmin):
    """Calls and tokens per key, tool and day; written by the MCP service only."""

    list_display = ("day", "key", "tool", "calls", "failures", "prompt_tokens", "completion_tokens")
    list_filter = ("day", "tool")
    search_fields = ("key__prefix", "key__name", "key__owner__username")
    list_select_related = ("key",)
    date_hierarchy = "day"

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are created here; the whole key is shown once, in the page answering the save or the rotation.

    Never in a message: the default message storage is a signed but readable cookie, falling back to the session.
    """

    list_display = ("prefix", "name", "owner", "created_at", "last_used_at", "state", "calls_today", "daily_quota",
                    "rate_limit_per_minute")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "owner__username")
    fields = ("name", "owner", "app", "expires_at", "daily_quota", "rate_limit_per_minute", "prefix", "created_at",
              "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke", "rotate"]

    def get_inlines(self, request, obj):
        return [UsageInline] if obj else []  # a new key has no usage yet

    def get_queryset(self, request):
        today = timezone.localdate()
        return super().get_queryset(request).select_related("owner").annotate(
            _calls_today=Sum("usage__calls", filter=Q(usage__day=today)))

    @admin.display(description="calls today", ordering="_calls_today")
    def calls_today(self, obj) -> int:
        return obj._calls_today or 0

    def save_model(self, request, obj, form, change):
        if change:
            from apikeys.services import api_key_limits

            # An emptied limit is the default again, as on a new key; 0 stays unlimited.
            obj.daily_quota, obj.rate_limit_per_minute = api_key_limits(
                daily_quota=obj.daily_quota, rate_limit_per_minute=obj.rate_limit_per_minute)
            super().save_model(request, obj, form, change)
            return
        from apikeys.services import api_key_issue

        record, key = api_key_issue(owner=obj.owner, name=obj.name, expires_at=obj.expires_at,
                                    daily_quota=obj.daily_quota, rate_limit_per_minute=obj.rate_limit_per_minute)
        obj.pk = record.pk
        obj.prefix = record.prefix
        obj.issued_key = ShownOnce(key)  # for response_add, on this in-memory object only

    def response_add(self, request, obj, post_url_continue=None):
        issued = getattr(obj, "issued_key", None)
        if issued is None:
            return super().response_add(request, obj, post_url_continue)
        return self.keys_shown_once(request, "Copy this key now", [(obj, None, issued)])

    def keys_shown_once(self, request, title: str, keys: list) -> TemplateResponse:
        """A page showing each new key once, kept out of caches; `keys` holds (record, replaced record, key)."""
        response = TemplateResponse(request, "admin/apikeys/apikey/keys_issued.html", {
            **self.admin_site.each_context(request), "title": title, "subtitle": None, "opts": self.opts,
            "keys": keys})
        add_never_cache_headers(response)
        return response

    @admin.action(description="Revoke the selected keys (they stop working at once)")
    def revoke(self, request, queryset):
        from apikeys.services import api_key_revoke

        for key in queryset:
            api_key_revoke(key=key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")

    @admin.action(description="Rotate: revoke and issue a replacement (shown once)")
    def rotate(self, request, queryset):
        from apikeys.services import api_key_rotate

        rotated = []
        for key in queryset:
            new, plaintext = api_key_rotate(key=key)
            rotated.append((new, key, ShownOnce(plaintext)))
        return self.keys_shown_once(request, "Copy the replacement keys now", rotated)

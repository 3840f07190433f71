from django.contrib import admin

from assistant.models import Feedback, TokenPool


@admin.register(TokenPool)
class TokenPoolAdmin(admin.ModelAdmin):
    list_display = ("day", "channel", "limit", "spent", "remaining", "updated_at")
    list_filter = ("channel",)


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    list_display = ("request", "reason", "created_at")
    search_fields = ("reason", "request__question")
    raw_id_fields = ("request",)

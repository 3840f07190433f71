from django.contrib import admin, messages

from assistant.models import Feedback, TokenPool
from infra.errors import ServiceError


@admin.register(TokenPool)
class TokenPoolAdmin(admin.ModelAdmin):
    list_display = ("day", "channel", "limit", "spent", "remaining", "updated_at")
    list_filter = ("channel",)


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin):
    list_display = ("request", "reason", "created_at")
    search_fields = ("reason", "request__question")
    raw_id_fields = ("request",)
    actions = ["make_golden_drafts"]

    @admin.action(description="Make draft golden questions (question and evidence attached) for QA")
    def make_golden_drafts(self, request, queryset):
        from evaluation.services.golden import draft_from_request

        made = 0
        for feedback in queryset.select_related("request"):
            try:
                draft_from_request(request_id=feedback.request.request_id, reason=feedback.reason)
                made += 1
            except ServiceError as exc:
                messages.error(request, f"{feedback.request.request_id}: {exc.message}")
        self.message_user(request, f"{made} draft(s) ready under Evaluation › Golden drafts.")

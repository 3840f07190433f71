"""Golden sets are edited here: a version some run used is frozen (read-only); "new version for editing"
copies it. JSON Lines come in through "Import JSON Lines" and go out through "Export"."""

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse

from evaluation.models import EvalRun, GoldenDraft, GoldenItem, GoldenSet
from evaluation.services.golden import draft_add, golden_export, golden_import, golden_new_version
from infra.admin_readonly import ReadOnlyAdmin
from infra.errors import ServiceError


class GoldenItemInline(admin.StackedInline):
    model = GoldenItem
    extra = 0
    fields = ("item_id", "question", "layer", "answerable", "expected_classes", "expected_members", "negative_kind",
              "kb", "source", "must_mention", "forbidden", "reference", "needs_code", "position")

    def has_change_permission(self, request, obj=None):
        return obj is None or not obj.frozen

    has_add_permission = has_delete_permission = has_change_permission


class ImportForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="An existing name gets its next version")
    kind = forms.ChoiceField(choices=GoldenSet.Kind.choices)
    file = forms.FileField(help_text="JSON Lines in the golden SCHEMA.md format")


@admin.register(GoldenSet)
class GoldenSetAdmin(admin.ModelAdmin):
    list_display = ("name", "version", "kind", "question_count", "frozen", "created_at", "note")
    list_filter = ("kind",)
    search_fields = ("name", "note")
    inlines = [GoldenItemInline]
    actions = ["new_version", "export"]
    readonly_fields = ("created_at", "created_by")

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.frozen:
            return ("name", "version", "kind", "note", "created_at", "created_by")
        return ("version", "created_at", "created_by")

    @admin.display(description="questions")
    def question_count(self, obj) -> int:
        return obj.items.count()

    @admin.display(boolean=True)
    def frozen(self, obj) -> bool:
        return obj.frozen

    @admin.action(description="New version for editing (copies the questions)")
    def new_version(self, request, queryset):
        for golden_set in queryset:
            copy = golden_new_version(golden_set, user=request.user)
            self.message_user(request, f"{copy} created; edit it, runs of older versions keep their questions.")

    @admin.action(description="Export as JSON Lines")
    def export(self, request, queryset):
        golden_set = queryset.first()
        response = HttpResponse(golden_export(golden_set), content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{golden_set.name}-v{golden_set.version}.jsonl"'
        return response

    def get_urls(self):
        return [path("import/", self.admin_site.admin_view(self.import_view), name="evaluation_goldenset_import"),
                *super().get_urls()]

    def import_view(self, request):
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            try:
                text = form.cleaned_data["file"].read().decode("utf-8")
                golden_set = golden_import(name=form.cleaned_data["name"], kind=form.cleaned_data["kind"], text=text,
                                           user=request.user, note=f"uploaded {form.cleaned_data['file'].name}"[:300])
            except UnicodeDecodeError:
                form.add_error("file", "The file is not UTF-8 text.")
            except ServiceError as exc:
                form.add_error("file", exc.message)
            else:
                messages.success(request, f"Imported {golden_set} with {golden_set.items.count()} questions.")
                return redirect(reverse("admin:evaluation_goldenset_change", args=[golden_set.pk]))
        return render(request, "admin/evaluation/import.html", {**self.admin_site.each_context(request),
                                                                 "form": form, "title": "Import a golden set"})


@admin.register(EvalRun)
class EvalRunAdmin(ReadOnlyAdmin):
    list_display = ("id", "golden_set", "status", "verdict", "done", "total", "candidate", "created_at")
    list_filter = ("status", "verdict", "candidate")
    readonly_fields = [f.name for f in EvalRun._meta.fields]


@admin.register(GoldenDraft)
class GoldenDraftAdmin(admin.ModelAdmin):
    """Drafts made from thumbs-down answers: complete the expected fields, choose a set, then add."""

    list_display = ("request_id", "question", "channel", "kb", "status", "target_set", "created_at")
    list_filter = ("status", "channel")
    search_fields = ("question", "request_id", "feedback_reason")
    readonly_fields = ("request_id", "channel", "question", "answer", "evidence", "feedback_reason", "status",
                       "created_at", "added_item")
    fields = ("request_id", "channel", "kb", "question", "answer", "evidence", "feedback_reason", "target_set",
              "layer", "answerable", "expected_classes", "expected_members", "negative_kind", "must_mention",
              "forbidden", "reference", "needs_code", "status", "added_item", "created_at")
    actions = ["add_to_sets", "dismiss"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Add to a new version of their target sets")
    def add_to_sets(self, request, queryset):
        for draft in queryset:
            try:
                item = draft_add(draft, user=request.user)
                self.message_user(request, f"{draft.request_id} added as {item.item_id} to {item.golden_set}.")
            except ServiceError as exc:
                messages.error(request, f"{draft.request_id}: {exc.message}")

    @admin.action(description="Dismiss")
    def dismiss(self, request, queryset):
        queryset.filter(status=GoldenDraft.Status.OPEN).update(status=GoldenDraft.Status.DISMISSED)

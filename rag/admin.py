from django import forms
from django.contrib import admin, messages

from infra.errors import ServiceError
from rag.models import (ClassAlias, Document, DocumentLabel, EverydayWord, IndexVersion, KnowledgeBase, Label,
                        LabelValue, RequestRecord, RetrievalApp)


class KnowledgeBaseForm(forms.ModelForm):
    class Meta:
        model = KnowledgeBase
        fields = ("slug", "name", "language", "source_url", "source_dir", "base_url", "sync_interval_minutes",
                  "sdk", "sdk_version", "sdk_aliases", "sdk_order")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # An SDK version's slug is `<sdk>@<version>`, made from the two fields below it.
        self.fields["slug"] = forms.CharField(max_length=64, required=False, help_text=(
            "Lowercase letters, digits and dashes; for an SDK version, left empty: <sdk>@<version>"))
        self.fields["sdk"].queryset = KnowledgeBase.objects.filter(sdk__isnull=True).exclude(pk=self.instance.pk)
        self.fields["sdk_order"].required = False  # left empty: 0
        self.fields["sdk_aliases"].required = False
        self.fields["source_dir"].required = False
        self.fields["sync_interval_minutes"].required = False  # left empty: no schedule
        self.fields["source_dir"].help_text += " (for a git source: set from it, its checkout in the data folder)"

    def clean(self):
        """A git source URL allowed by a RAG_SOURCE_ROOTS prefix (its checkout becomes the source folder), else a
        folder inside RAG_SOURCE_ROOTS, stored resolved (as `rag reindex --source` stores either)."""
        from rag.services.knowledge import kb_source_check
        from rag.services.sources import source_check, source_folder

        cleaned = super().clean()
        cleaned["sync_interval_minutes"] = cleaned.get("sync_interval_minutes") or 0
        cleaned["sdk_order"] = cleaned.get("sdk_order") or 0
        cleaned["sdk_aliases"] = cleaned.get("sdk_aliases") or []
        self._clean_sdk_version(cleaned)
        try:
            if cleaned.get("source_url"):
                parsed = source_check(cleaned["source_url"])
                cleaned["source_url"] = parsed.spec
                cleaned["source_dir"] = str(source_folder(cleaned.get("slug") or self.instance.slug, parsed))
            elif cleaned.get("source_dir"):
                cleaned["source_dir"] = kb_source_check(cleaned["source_dir"])
            else:
                raise ServiceError("source_missing", "Give a source folder or a git source URL.")
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None
        if self.instance.pk and cleaned["source_url"] != self.instance.source_url:
            self.instance.source_revision = ""  # another repository or ref: nothing of it is synced yet
        return cleaned

    def _clean_sdk_version(self, cleaned: dict) -> None:
        """An SDK version names its SDK and version (its slug follows from them); anything else is a slug."""
        from django.utils.text import slugify

        from rag.services.sdk import checked_version

        try:
            if cleaned.get("sdk") is not None:
                version = checked_version(cleaned.get("sdk_version") or "")
                cleaned["slug"] = f"{cleaned['sdk'].slug}@{version}"
                cleaned["sdk_aliases"] = [checked_version(a) for a in cleaned.get("sdk_aliases") or []]
            elif cleaned.get("sdk_version"):
                raise ServiceError("invalid_sdk_version", "An SDK version needs its SDK.")
            elif not cleaned.get("slug") or slugify(cleaned["slug"]) != cleaned["slug"]:
                raise ServiceError("invalid_kb_slug", "A knowledge base slug uses lowercase letters, digits and dashes.")
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    form = KnowledgeBaseForm
    list_display = ("slug", "sdk_version", "language", "active_version", "document_total", "source",
                    "source_revision", "source_synced_at", "updated_at")
    readonly_fields = ("active_version", "source_revision", "source_synced_at", "sync_checked_at", "sync_error",
                       "created_at", "updated_at")
    actions = ["rebuild_index"]

    @admin.display(description="source")
    def source(self, obj):
        return obj.source_url or obj.source_dir

    @admin.display(description="documents")
    def document_total(self, obj):
        return obj.documents.count()

    @admin.action(description="Rebuild the index in the background")
    def rebuild_index(self, request, queryset):
        from rag.tasks import index_build_task

        from infra.queue import enqueue

        try:
            for kb in queryset:
                enqueue(index_build_task, kb.pk)
        except ServiceError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
            return
        self.message_user(request, f"Queued {queryset.count()} rebuild(s); the worker switches each when it validates.")


@admin.register(IndexVersion)
class IndexVersionAdmin(admin.ModelAdmin):
    list_display = ("name", "kb", "status", "chunk_count", "chunks_embedded", "chunks_reused", "model_id",
                    "built_at", "activated_at")
    list_filter = ("kb", "status")
    actions = ["activate"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Make this version active")
    def activate(self, request, queryset):
        # Imported on use: the services load the engine, which a process that only starts Django does not need.
        from rag.services.knowledge import index_activate

        if queryset.count() != 1:
            self.message_user(request, "Choose exactly one version.", level=messages.ERROR)
            return
        try:
            index_activate(queryset.get())
        except ServiceError as exc:
            self.message_user(request, exc.message, level=messages.ERROR)
        else:
            self.message_user(request, "Activated.")


class DocumentLabelInline(admin.TabularInline):
    """Label values on a document: add or remove them here; those from the page's front matter come back on
    the next ingest (edit the page instead)."""

    model = DocumentLabel
    extra = 1
    fields = ("value", "from_source")
    readonly_fields = ("from_source",)
    autocomplete_fields = ("value",)


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("id", "path", "kb", "title", "chunk_count", "changed_at")
    list_filter = ("kb", "labels__label")
    search_fields = ("path", "title")
    inlines = [DocumentLabelInline]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False


class LabelValueInline(admin.TabularInline):
    model = LabelValue
    extra = 1
    fields = ("value",)


@admin.register(Label)
class LabelAdmin(admin.ModelAdmin):
    list_display = ("name", "description")
    search_fields = ("name",)
    inlines = [LabelValueInline]


@admin.register(LabelValue)
class LabelValueAdmin(admin.ModelAdmin):
    list_display = ("id", "label", "value")
    list_filter = ("label",)
    search_fields = ("value", "label__name")


class RetrievalAppForm(forms.ModelForm):
    class Meta:
        model = RetrievalApp
        fields = ("name", "published", "knowledge_bases", "rag_setting")

    def clean_rag_setting(self):
        from rag.services.retrieval import setting_of

        value = self.cleaned_data["rag_setting"] or {}
        try:
            setting_of(value)
        except ServiceError as exc:
            raise forms.ValidationError(exc.message) from None
        return value


@admin.register(RetrievalApp)
class RetrievalAppAdmin(admin.ModelAdmin):
    form = RetrievalAppForm
    list_display = ("id", "name", "published", "created_at")
    list_filter = ("published",)
    filter_horizontal = ("knowledge_bases",)


@admin.register(ClassAlias)
class ClassAliasAdmin(admin.ModelAdmin):
    list_display = ("alias", "class_name", "kb", "created_at")
    list_filter = ("kb",)
    search_fields = ("alias", "class_name")


class EverydayWordForm(forms.ModelForm):
    class Meta:
        model = EverydayWord
        fields = ("phrase", "terms", "source", "kb")

    def clean(self):
        """A phrase of at least 2 visible characters, not already in the table for the same base (ignoring case and
        spacing, which is how questions are matched), with terms and the page they come from."""
        cleaned = super().clean()
        phrase = " ".join((cleaned.get("phrase") or "").split())
        if len(phrase) < 2:
            raise forms.ValidationError("The phrase needs at least 2 characters.", code="invalid_phrase")
        if not " ".join((cleaned.get("terms") or "").split()):
            raise forms.ValidationError("Give the docs' terms for the phrase.", code="invalid_terms")
        same = EverydayWord.objects.filter(kb=cleaned.get("kb")).exclude(pk=self.instance.pk)
        if any(" ".join(p.casefold().split()) == phrase.casefold() for p in same.values_list("phrase", flat=True)):
            raise forms.ValidationError(f"{phrase!r} is already in the table for this knowledge base.",
                                        code="phrase_exists")
        cleaned["phrase"], cleaned["terms"] = phrase, " ".join(cleaned["terms"].split())
        return cleaned


@admin.register(EverydayWord)
class EverydayWordAdmin(admin.ModelAdmin):
    form = EverydayWordForm
    list_display = ("phrase", "terms", "source", "kb", "created_at")
    list_filter = ("kb",)
    search_fields = ("phrase", "terms", "source")


@admin.register(RequestRecord)
class RequestRecordAdmin(admin.ModelAdmin):
    list_display = ("created_at", "channel", "kind", "kb", "question", "mode", "confidence", "degraded",
                    "error_code", "latency_ms")
    list_filter = ("channel", "kind", "mode", "degraded")
    search_fields = ("request_id", "question")

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

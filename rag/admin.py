from django.contrib import admin, messages

from rag.errors import ServiceError
from rag.models import ClassAlias, Document, IndexVersion, KnowledgeBase, RequestRecord


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(admin.ModelAdmin):
    list_display = ("slug", "language", "active_version", "document_total", "source_dir", "updated_at")
    readonly_fields = ("active_version", "created_at", "updated_at")
    actions = ["rebuild_index"]

    @admin.display(description="documents")
    def document_total(self, obj):
        return obj.documents.count()

    @admin.action(description="Rebuild the index in the background")
    def rebuild_index(self, request, queryset):
        from rag.tasks import index_build_task

        for kb in queryset:
            index_build_task.delay(kb.pk)
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


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    list_display = ("path", "kb", "title", "chunk_count", "changed_at")
    list_filter = ("kb",)
    search_fields = ("path", "title")

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(ClassAlias)
class ClassAliasAdmin(admin.ModelAdmin):
    list_display = ("alias", "class_name", "kb", "created_at")
    list_filter = ("kb",)
    search_fields = ("alias", "class_name")


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

from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "retrieval"
    verbose_name = "Retrieval APIs (open, RAGFlow, Dify)"

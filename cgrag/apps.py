from django.apps import AppConfig


class CgragConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "cgrag"
    verbose_name = "CG_RAG API"

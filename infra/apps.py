from django.apps import AppConfig


class InfraConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "infra"
    verbose_name = "Platform"

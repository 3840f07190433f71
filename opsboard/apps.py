from django.apps import AppConfig


class OpsboardConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'opsboard'

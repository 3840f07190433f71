from django.apps import AppConfig


class AssistantConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'assistant'

    def ready(self):
        from assistant import checks, logs  # noqa: F401 - checks registers the deploy checks

        logs.install()

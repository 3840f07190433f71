from django.apps import AppConfig


class ApikeysConfig(AppConfig):
    default_auto_field = 'django.db.models.BigAutoField'
    name = 'apikeys'

    def ready(self):
        from apikeys import checks  # noqa: F401 - registers the deploy check of keyless MCP

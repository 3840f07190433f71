"""ASGI entry point: Django over HTTP, Channels for WebSockets (served by Daphne)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()

application = ProtocolTypeRouter({
    "http": django_application,
    "websocket": URLRouter([]),
})

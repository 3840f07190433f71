"""ASGI entry point: Django over HTTP, Channels for WebSockets (served by Daphne)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()

from assistant.routing import websocket_urlpatterns  # noqa: E402  (needs the apps loaded above)

application = ProtocolTypeRouter({
    "http": django_application,
    "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
})

"""ASGI entry point: Django over HTTP, the MCP service at /mcp, Channels for WebSockets (served by Daphne)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_application = get_asgi_application()

from apikeys.mcp.http import McpHttpApp, is_mcp_path  # noqa: E402  (needs the apps loaded above)
from assistant.routing import websocket_urlpatterns  # noqa: E402

from rag.pipeline import start_warm_up  # noqa: E402

mcp_application = McpHttpApp()
start_warm_up()  # the model loads now, not on the first question (RAG_WARM_UP)


async def http_application(scope, receive, send):
    if is_mcp_path(scope["path"]):
        await mcp_application(scope, receive, send)
    else:
        await django_application(scope, receive, send)


application = ProtocolTypeRouter({
    "http": http_application,
    "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    "lifespan": mcp_application.lifespan,  # sent by uvicorn and hypercorn; Daphne sends none (see McpHttpApp)
})

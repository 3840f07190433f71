"""ASGI entry point: Django over HTTP, the MCP service at /mcp, Channels for WebSockets (served by Daphne)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ragsite.settings")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import asyncio  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from channels.db import database_sync_to_async  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402

HTTP_THREADS = 32  # requests whose middleware and view run at once, per process (an /api/chat may wait on the model)


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler, with the middleware chain and the view run synchronously in one thread hop.

    Every middleware and HTTP view here is synchronous (the SSE views return async iterators, which still
    stream from the event loop), so Django's async chain crossed between the event loop and a thread for
    each middleware hook and the view: about 16 hops, some 1 ms of a 6 ms request measured in-process.
    The hop goes to a pool of long-lived threads instead of a new thread per request, with Django's
    connection hygiene around it (database_sync_to_async), so DJANGO_DB_CONN_MAX_AGE keeps one connection
    per thread as under a threaded WSGI server, rather than one per request that no request closes.
    """

    executor = ThreadPoolExecutor(max_workers=HTTP_THREADS, thread_name_prefix="http")

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        # Django cancels this when the client disconnects, but the view's thread runs on: `request.client_left`
        # tells a long view (/api/chat waiting on the model) to stop work nobody will read.
        request.client_left = threading.Event()
        try:
            return await database_sync_to_async(self.get_response, thread_sensitive=False, executor=self.executor)(
                request)
        except asyncio.CancelledError:
            request.client_left.set()
            raise


def get_asgi_application() -> OneHopASGIHandler:
    """django.core.asgi.get_asgi_application, with the handler above."""
    import django

    django.setup(set_prefix=False)
    return OneHopASGIHandler()


django_application = get_asgi_application()

from apikeys.mcp.http import McpHttpApp, is_mcp_path  # noqa: E402  (needs the apps loaded above)
from assistant.routing import websocket_urlpatterns  # noqa: E402

from rag.pipeline import start_warm_up  # noqa: E402
from rag.streams import stop_streams_when_cancelled  # noqa: E402

mcp_application = McpHttpApp()
start_warm_up()  # the model loads now, not on the first question (RAG_WARM_UP)


async def http_application(scope, receive, send):
    if is_mcp_path(scope["path"]):
        await mcp_application(scope, receive, send)
    else:
        await django_application(scope, receive, send)


# A cancelled application (Daphne cancels them all on SIGTERM) first ends its streamed answers (rag.streams).
application = stop_streams_when_cancelled(ProtocolTypeRouter({
    "http": http_application,
    "websocket": AllowedHostsOriginValidator(URLRouter(websocket_urlpatterns)),
    "lifespan": mcp_application.lifespan,  # sent by uvicorn and hypercorn; Daphne sends none (see McpHttpApp)
}))

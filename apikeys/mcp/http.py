"""/mcp in the Django ASGI application: a gate in front of the SDK's streamable-HTTP app.

Per request, before the SDK sees it: the Host must be one of ALLOWED_HOSTS and a browser Origin one of
RAG_MCP_ALLOWED_ORIGINS (DNS-rebinding protection); the Bearer key is checked (required in production
mode, optional in debug mode); each call of one of our tools is admitted against its key's rate limit
and daily quota. Refusals are JSON-RPC error bodies with a stable `data.code`, at HTTP 400/401/403/429,
which MCP clients surface as the failed request's error; a 401's `WWW-Authenticate` challenge names the
error and offers no OAuth (apikeys.api), so clients show that message rather than start an OAuth login.

Lifecycle: the SDK's session manager must be inside its `run()` context to serve anything. Servers that
send ASGI lifespan events (uvicorn) start it at startup through `lifespan()`; Daphne sends none (daphne
issue 264), so the first request starts it in a background task that lives as long as the process.
That task also publishes the number of open sessions for the ops site every few seconds.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
from dataclasses import dataclass, field

import pydantic_core
from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings

from apikeys.api import bearer_of, key_refusal
from apikeys.mcp.server import SCOPE_CALLER, SCOPE_KEY_CALLS, build_server
from apikeys.mcp.service import Caller, counted_tool_names, mcp_refusal_record
from apikeys.models import ApiKey
from apikeys.services import api_key_admit_call, api_key_authenticate
from infra import live
from infra.clients import scope_address
from infra.errors import ServiceError

logger = logging.getLogger(__name__)

PATH = "/mcp"
ALIASES = ("/cg-rag/mcp",)  # the same server where CG_RAG's health says it is (`mcp_path`)
GAUGE_INTERVAL = 5  # seconds between publications of the open-session count
REFUSED = -32001  # JSON-RPC server-defined error code for a request the gate refused


def is_mcp_path(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in (PATH, *ALIASES))


def _served_path(scope: dict) -> dict:
    """The scope with an alias's path rewritten to PATH, where the SDK's app listens."""
    path = scope["path"]
    for alias in ALIASES:
        if path == alias or path.startswith(alias + "/"):
            path = PATH + path[len(alias):]
            return {**scope, "path": path, "raw_path": path.encode("latin-1")}
    return scope


def _origin_allowed(origin: str, patterns: list[str]) -> bool:
    """Exact origins, or `scheme://host:*` for any port of that host."""
    for pattern in patterns:
        if origin == pattern:
            return True
        if pattern.endswith(":*") and re.fullmatch(re.escape(pattern[:-2]) + r":\d+", origin):
            return True
    return False


def _allowed_hosts() -> list[str]:
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]  # what Django itself allows in that case
    return list(settings.ALLOWED_HOSTS)


async def _send_refusal(send, refusal: ServiceError, request_id=None) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "error": {"code": REFUSED, "message": refusal.message, "data": {"code": refusal.code}}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), str(v).encode()) for k, v in refusal.headers.items()]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _tool_calls(body: bytes, names: tuple[str, ...]) -> list[dict]:
    """The JSON-RPC `tools/call` requests for our tools in a POST body (one message or a batch).

    Parsed with the SDK's own parser, so the gate counts exactly the calls the SDK will run; what it cannot
    parse (malformed, or nested deeper than its recursion limit) the SDK answers itself: 400, a parse error.
    """
    try:
        payload = pydantic_core.from_json(body)
    except ValueError:
        return []
    messages = payload if isinstance(payload, list) else [payload]
    return [m for m in messages if isinstance(m, dict) and m.get("method") == "tools/call"
            and isinstance(m.get("params"), dict) and m["params"].get("name") in names]


class McpHttpApp:
    """The ASGI application mounted at /mcp."""

    def __init__(self):
        self.server = build_server(transport="http")
        self.sdk_app = self.server.streamable_http_app(
            streamable_http_path=PATH,
            stateless_http=settings.RAG_MCP_STATELESS,
            session_idle_timeout=settings.RAG_MCP_SESSION_IDLE_TIMEOUT,
            # The gate below checks Host and Origin against Django's own settings; the SDK's check, which
            # only knows exact hosts, would refuse deployments that ALLOWED_HOSTS admits (".example.com").
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager = self.server.session_manager
        self._keeper: asyncio.Task | None = None
        self._ready: asyncio.Event | None = None
        self._start_error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    def open_sessions(self) -> int:
        # The SDK keeps no public count; its session table is the truth (it also drops idle-expired sessions).
        return len(getattr(self.manager, "_server_instances", ()))

    async def _keep(self, stop: asyncio.Event | None = None) -> None:
        try:
            async with self.manager.run():
                self._ready.set()
                while stop is None or not stop.is_set():
                    live.set_gauge("mcp_sessions", self.open_sessions())
                    await database_sync_to_async(live.publish, thread_sensitive=False)()
                    try:
                        await asyncio.wait_for((stop or asyncio.Event()).wait(), GAUGE_INTERVAL)
                    except TimeoutError:
                        pass
        except BaseException as exc:  # reported to every waiting request, then re-raised
            self._start_error = exc
            self._ready.set()
            raise
        finally:
            live.set_gauge("mcp_sessions", 0)

    async def ensure_started(self) -> None:
        if self._keeper is None:  # no await between the test and the assignment: one starter per process
            self._ready = asyncio.Event()
            self._keeper = asyncio.get_running_loop().create_task(self._keep(), name="mcp-session-manager")
        await self._ready.wait()
        if self._start_error is not None:
            raise RuntimeError("the MCP session manager failed to start") from self._start_error

    async def lifespan(self, scope, receive, send) -> None:
        """ASGI lifespan (uvicorn, hypercorn): run the session manager from startup to shutdown."""
        message = await receive()
        assert message["type"] == "lifespan.startup"
        stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._keeper = asyncio.get_running_loop().create_task(self._keep(stop), name="mcp-session-manager")
        await self._ready.wait()
        if self._start_error is not None:
            await send({"type": "lifespan.startup.failed", "message": str(self._start_error)})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        stop.set()
        await asyncio.gather(self._keeper, return_exceptions=True)
        await send({"type": "lifespan.shutdown.complete"})

    # -- requests ----------------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(scope, receive, send)
            return
        await self.ensure_started()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
        try:
            self._check_host_and_origin(headers)
        except ServiceError as refusal:
            await _send_refusal(send, refusal)
            return
        body, receive = await self._buffer_body(scope, receive)
        admit = functools.partial(_admit, headers=headers, address=scope_address(scope),
                                  method=scope.get("method"), body=body)
        if headers.get("authorization") or settings.RAG_MCP_REQUIRE_KEY:
            # One thread hop for the key and its limits: each hop costs a database connection under
            # CONN_MAX_AGE=0 (channels' connection hygiene), and the tool call takes another.
            admission = await database_sync_to_async(admit, thread_sensitive=False)()
        else:
            admission = admit()  # no key: nothing to look up
        if admission.refusal is not None:
            await _send_refusal(send, admission.refusal, admission.refused_id)
            return
        caller, key = admission.caller, admission.key
        scope = {**_served_path(scope), SCOPE_CALLER: caller, SCOPE_KEY_CALLS: admission.key_calls}
        if key is not None:
            # The SDK binds a session to the credential that opened it: another key cannot use its id.
            scope["user"] = AuthenticatedUser(AccessToken(token=key.prefix, client_id=key.prefix, scopes=[]))
        await self.sdk_app(scope, receive, _with_headers(send, admission.limit_headers))

    def _check_host_and_origin(self, headers: dict) -> None:
        domain, _port = split_domain_port(headers.get("host", ""))
        if not domain or not validate_host(domain, _allowed_hosts()):
            raise ServiceError("host_not_allowed", "This Host is not served here (see DJANGO_ALLOWED_HOSTS).",
                               status=400)
        origin = headers.get("origin")
        if origin and not _origin_allowed(origin, settings.RAG_MCP_ALLOWED_ORIGINS):
            raise ServiceError("origin_not_allowed",
                               f"Origin {origin[:100]} may not call this server (see RAG_MCP_ALLOWED_ORIGINS).",
                               status=403)

    async def _buffer_body(self, scope, receive):
        """Read the request body (to see which tools it calls) and hand the SDK a replay of it."""
        if scope.get("method") != "POST":
            return b"", receive
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > DEFAULT_MAX_REQUEST_BODY_SIZE:
                return None, receive
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return body, replay


@dataclass(frozen=True, slots=True)
class Admission:
    """What the gate decided for one request: its caller and key, or the refusal to send instead."""

    caller: Caller | None = None
    key: ApiKey | None = None
    limit_headers: dict[str, str] = field(default_factory=dict)
    key_calls: dict = field(default_factory=dict)  # the calls admitted on the key, by JSON-RPC id (as a string)
    refusal: ServiceError | None = None
    refused_id: object = None  # the JSON-RPC id of the refused tool call


def _admit(*, headers: dict, address: str, method: str | None, body: bytes | None) -> Admission:
    """Check the Bearer key (a 401 or 429 refusal), the body's size, and admit each call of our tools in the
    body against the key's rate limit and daily quota (a refused call is recorded)."""
    try:
        caller, key = _authenticate(headers, address)
    except ServiceError as refusal:
        return Admission(refusal=refusal)
    if body is None:
        return Admission(refusal=ServiceError("request_too_large", "The request body is too large.", status=413))
    limit_headers: dict[str, str] = {}
    key_calls = {}
    if key is not None and method == "POST":
        for call in _tool_calls(body, counted_tool_names()):
            tool, arguments = call["params"]["name"], call["params"].get("arguments") or {}
            try:
                key_call = key_calls[str(call.get("id"))] = api_key_admit_call(key=key, tool=tool)
                limit_headers = key_call.headers
            except ServiceError as exc:
                mcp_refusal_record(caller=Caller(key_id=key.pk, key_prefix=key.prefix,
                                                 session_id=headers.get("mcp-session-id", ""), transport="http"),
                                   tool=tool, arguments=arguments, error=exc)
                return Admission(refusal=exc, refused_id=call.get("id"))
    return Admission(caller=caller, key=key, limit_headers=limit_headers, key_calls=key_calls)


def _authenticate(headers: dict, address: str) -> tuple[Caller, ApiKey | None]:
    authorization = headers.get("authorization", "")
    if not authorization and not settings.RAG_MCP_REQUIRE_KEY:
        return Caller(transport="http"), None
    # The 401's challenge names the error and offers no OAuth, and the OAuth discovery paths are 404s
    # (apikeys.api), so clients that try OAuth on a 401 stop and show this message instead.
    raw = bearer_of(authorization)  # a missing or malformed header: 401 with its own challenge (invalid_request)
    try:
        key = api_key_authenticate(raw=raw, address=address)
    except ServiceError as exc:
        raise key_refusal(exc) from None
    return Caller(key_id=key.pk, key_prefix=key.prefix, transport="http"), key


def _with_headers(send, extra: dict[str, str]):
    if not extra:
        return send
    encoded = [(k.lower().encode(), v.encode()) for k, v in extra.items()]

    async def wrapped(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *encoded]}
        await send(message)

    return wrapped

"""The /mcp gate in-process, over raw ASGI (bodies and addresses no SDK client would send): failed attempts
counted per client behind a trusted proxy, and bodies nested deeper than the stack refused as a parse error."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from apikeys.mcp.http import McpHttpApp
from apikeys.services import FAILED_ATTEMPTS_LIMIT, api_key_issue

pytestmark = pytest.mark.django_db(transaction=True)

ACCEPT = (b"accept", b"application/json, text/event-stream")
JSON = (b"content-type", b"application/json")
PROXY = ("10.0.0.2", 40000)  # the load balancer: every client's socket address


@contextlib.asynccontextmanager
async def serving():
    """A McpHttpApp with its session manager running (started and stopped by ASGI lifespan events)."""
    app = McpHttpApp()
    inbox: asyncio.Queue = asyncio.Queue()
    started = asyncio.Event()

    async def send(message):
        if message["type"] == "lifespan.startup.complete":
            started.set()

    await inbox.put({"type": "lifespan.startup"})
    running = asyncio.create_task(app({"type": "lifespan"}, inbox.get, send))
    await asyncio.wait_for(started.wait(), 10)
    try:
        yield app
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(running, 10)


async def post(app, body: bytes, *, headers: dict[str, str] | None = None, client=PROXY) -> tuple[int, dict | bytes]:
    """POST `body` to /mcp; return the status and the reply's body (parsed when it is JSON, else as sent)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "root_path": "", "client": client,
             "server": ("127.0.0.1", 8000),
             "headers": [(b"host", b"127.0.0.1:8000"), ACCEPT, JSON,
                         *((k.lower().encode(), v.encode()) for k, v in (headers or {}).items())]}
    sent = [{"type": "http.request", "body": body, "more_body": False}]
    replies: list[dict] = []

    async def receive():
        if sent:
            return sent.pop()
        await asyncio.sleep(3600)  # no disconnect while the reply is written

    async def send(message):
        replies.append(message)

    await asyncio.wait_for(app(scope, receive, send), 10)
    status = next(m["status"] for m in replies if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body")
    return status, json.loads(content) if content.startswith((b"{", b"[")) else content


PING = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "gate test", "version": "1"}}}).encode()


@pytest.mark.asyncio
async def test_behind_a_proxy_one_bad_client_does_not_lock_every_client_out(settings, django_user_model):
    settings.RAG_CLIENTS = {"ADDRESS_HEADER": "X-Forwarded-For", "TRUSTED_PROXIES": 1}
    owner = await django_user_model.objects.acreate(username="li.wei")
    _, secret = await asyncio.to_thread(api_key_issue, owner=owner, name="cursor")
    garbage = {"Authorization": "Bearer nonsense"}

    async with serving() as app:
        refused = [(await post(app, PING, headers={**garbage, "X-Forwarded-For": "203.0.113.7"}))[0]
                   for _ in range(FAILED_ATTEMPTS_LIMIT + 1)]
        other_mistyped = await post(app, PING, headers={**garbage, "X-Forwarded-For": "198.51.100.4"})
        other_served = await post(app, INITIALIZE, headers={"Authorization": f"Bearer {secret}",
                                                            "X-Forwarded-For": "198.51.100.4"})

    assert refused == [401] * FAILED_ATTEMPTS_LIMIT + [429]
    assert (other_mistyped[0], other_mistyped[1]["error"]["data"]["code"]) == (401, "invalid_api_key")
    assert other_served[0] == 200 and b'"result"' in other_served[1]


@pytest.mark.asyncio
@pytest.mark.parametrize("with_key", [True, False])
async def test_deeply_nested_json_in_the_mcp_gate_is_a_400_parse_error(settings, django_user_model, with_key):
    settings.RAG_MCP_REQUIRE_KEY = with_key
    headers = {}
    if with_key:
        owner = await django_user_model.objects.acreate(username="li.wei")
        _, secret = await asyncio.to_thread(api_key_issue, owner=owner, name="cursor")
        headers = {"Authorization": f"Bearer {secret}"}

    async with serving() as app:
        arrays = await post(app, b"[" * 5000, headers=headers)
        objects = await post(app, b'{"a":' * 5000 + b"1" + b"}" * 5000, headers=headers)

    for status, body in (arrays, objects):
        assert (status, body["jsonrpc"], body["error"]["code"]) == (400, "2.0", -32700)


@pytest.mark.asyncio
async def test_a_tool_call_that_finds_the_index_building_counts_neither_as_a_call_nor_as_a_failure(
        settings, django_user_model, corpus_copy):
    from apikeys.models import ApiKeyUsage
    from rag.models import IndexVersion
    from rag.tests.conftest import make_kb

    settings.RAG_MCP_STATELESS = True
    kb = await asyncio.to_thread(make_kb, corpus_copy)  # its first build still running
    await IndexVersion.objects.acreate(kb=kb, name="first-build", model_id="building")
    owner = await django_user_model.objects.acreate(username="li.wei")
    key, secret = await asyncio.to_thread(api_key_issue, owner=owner, name="cursor", daily_quota=1)
    call = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "search_sdk_docs", "arguments": {"question": "PerspectiveCamera fov", "kb": "sdk"}}}).encode()

    async with serving() as app:
        replies = [await post(app, call, headers={"Authorization": f"Bearer {secret}"}) for _ in range(2)]

    assert [status for status, _ in replies] == [200, 200]  # tool errors, not refusals: the quota is untouched
    assert all(b"index_building" in (body if isinstance(body, bytes) else json.dumps(body).encode())
               for _, body in replies)
    usage = [(u.calls, u.failures) async for u in ApiKeyUsage.objects.filter(key=key)]
    assert usage in ([], [(0, 0)])


@pytest.mark.asyncio
async def test_the_versions_tool_counts_against_the_keys_quota_like_the_question_tools(settings, django_user_model,
                                                                                       corpus_copy):
    from apikeys.models import ApiKeyUsage
    from rag.tests.conftest import make_built_kb

    settings.RAG_MCP_STATELESS = True
    await asyncio.to_thread(make_built_kb, corpus_copy)
    owner = await django_user_model.objects.acreate(username="li.wei")
    key, secret = await asyncio.to_thread(api_key_issue, owner=owner, name="cursor", daily_quota=1)
    call = json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "list_sdk_versions", "arguments": {"kb": "sdk"}}}).encode()

    async with serving() as app:
        first, second = [await post(app, call, headers={"Authorization": f"Bearer {secret}"}) for _ in range(2)]

    body = first[1] if isinstance(first[1], bytes) else json.dumps(first[1]).encode()
    assert first[0] == 200 and b"no SDK versions" in body
    assert second[0] == 429  # the daily quota of 1 is spent by the first listing
    assert [(u.tool, u.calls) async for u in ApiKeyUsage.objects.filter(key=key)] == [("list_sdk_versions", 1)]

"""End to end (slow): the SDK's MCP client against a live Daphne serving /mcp in the Django ASGI app, with and
without keys, from a foreign Origin, over the daily quota, in debug mode; and the same tools over stdio.
(The per-minute rate limit shares the refusal path; it is tested in test_usage without a clock to race.)"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx2
import pytest
from django.contrib.auth import get_user_model
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from apikeys.models import ApiKeyUsage
from apikeys.services import api_key_issue, api_key_revoke
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb
from rag.tests.live import ROOT, daphne, manage, project_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"


@pytest.fixture
def kb(corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("li.wei", password="x")


def refusal_of(error: BaseException) -> MCPError:
    """The MCPError inside what the client raised (anyio task groups wrap it in exception groups)."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return error


def connect(url: str, key: str | None = None, *, headers: dict | None = None, seen: list | None = None,
            mode: str = "legacy"):
    """An SDK client over streamable HTTP with an optional Bearer key; `seen` collects every response."""
    hooks = {"response": [_collector(seen)]} if seen is not None else {}
    http = create_mcp_http_client(headers={**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})})
    http.event_hooks = hooks
    return http, Client(streamable_http_client(url + "/mcp", http_client=http), mode=mode)


def _collector(seen: list):
    async def collect(response):
        seen.append(response)
    return collect


async def call_both(client: Client) -> tuple:
    tools = sorted(t.name for t in (await client.list_tools()).tools)
    search = await client.call_tool("search_sdk_docs", {"question": QUESTION, "top_k": 3})
    ask = await client.call_tool("ask_sdk_docs", {"question": QUESTION})
    return tools, search, ask


def open_sessions() -> int:
    status = manage("rag", "status", "--json")
    return json.loads(status.stdout)["live"]["gauges"].get("mcp_sessions", 0)


def test_production_mode_keys_origins_limits_usage_and_records(kb, owner):
    key, secret = api_key_issue(owner=owner, name="cursor", daily_quota=2)
    revoked, revoked_secret = api_key_issue(owner=owner, name="old laptop")
    api_key_revoke(key=revoked)

    async def scenario(url):
        outcome = {}
        seen: list = []
        http, client = connect(url, secret, seen=seen)
        async with http, client:
            outcome["tools"], outcome["search"], outcome["ask"] = await call_both(client)
            with pytest.raises(MCPError) as limited:
                await client.call_tool("search_sdk_docs", {"question": QUESTION})  # a third call today
            outcome["limited"] = limited.value
            outcome["limited_response"] = seen[-1]
            outcome["limit_headers"] = [r.headers.get("RateLimit-Remaining") for r in seen
                                        if r.request.method == "POST" and "RateLimit-Limit" in r.headers]
            deadline = time.monotonic() + 15  # the server publishes its session count every 5 s
            while (sessions := await asyncio.to_thread(open_sessions)) < 1 and time.monotonic() < deadline:
                await asyncio.sleep(1)
            outcome["open_sessions"] = sessions
        for name, (key_value, headers) in {"no key": (None, {}), "revoked": (revoked_secret, {}),
                                           "wrong origin": (secret, {"Origin": "http://evil.example"})}.items():
            http, client = connect(url, key_value, headers=headers)
            with pytest.raises(BaseException) as refused:
                async with http, client:
                    pass
            outcome[name] = refusal_of(refused.value)
        async with httpx2.AsyncClient() as raw:
            outcome["raw no key"] = await raw.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                                   headers={"Accept": "application/json, text/event-stream"})
        return outcome

    with daphne() as url:
        outcome = asyncio.run(scenario(url))

    assert outcome["tools"] == ["ask_sdk_docs", "list_sdk_versions", "read_sdk_docs", "search_sdk_docs"]
    search, ask = outcome["search"], outcome["ask"]
    assert not search.is_error and search.structured_content["results"][0]["class_name"] == "PerspectiveCamera"
    assert search.structured_content["index_version"] == kb.active_version.name
    assert not ask.is_error and ask.structured_content["citations"]
    assert outcome["open_sessions"] >= 1
    assert outcome["limit_headers"][:2] == ["1", "0"]  # RateLimit-* on the two admitted calls (then the 429's)
    assert outcome["limited"].error.data["code"] == "quota_exceeded"
    assert outcome["limited_response"].status_code == 429
    assert int(outcome["limited_response"].headers["Retry-After"]) >= 1
    assert outcome["no key"].error.data["code"] == "missing_api_key"
    assert outcome["revoked"].error.data["code"] == "invalid_api_key" and "revoked" in outcome["revoked"].error.message
    assert outcome["wrong origin"].error.data["code"] == "origin_not_allowed"
    raw = outcome["raw no key"]
    assert raw.status_code == 401 and raw.headers["WWW-Authenticate"].startswith("Bearer")

    records = list(RequestRecord.objects.filter(channel="mcp").order_by("created_at"))
    admitted = [r for r in records if not r.error_code]
    assert [(r.tool, r.kind) for r in admitted] == [("search_sdk_docs", "search"), ("ask_sdk_docs", "chat")]
    assert {r.api_key_prefix for r in records} == {key.prefix}  # refused keys never reach a tool
    assert all(r.session_id and r.transport == "http" for r in records)
    assert len({r.session_id for r in records}) == 1
    assert admitted[0].arguments == {"question": QUESTION, "top_k": 3, "kb": "sdk"}
    assert [r.error_code for r in records if r.error_code] == ["quota_exceeded"]
    usage = {u.tool: u.calls for u in ApiKeyUsage.objects.filter(key=key)}
    assert usage == {"search_sdk_docs": 1, "ask_sdk_docs": 1}
    assert not ApiKeyUsage.objects.filter(key=revoked).exists()


def test_debug_mode_allows_calls_without_a_key_recorded_as_anonymous(kb):
    async def scenario(url):
        http, client = connect(url, mode="auto")  # the modern protocol: no sessions
        async with http, client:
            return await call_both(client)

    with daphne(RAG_MCP_REQUIRE_KEY="false") as url:
        tools, search, ask = asyncio.run(scenario(url))

    assert tools == ["ask_sdk_docs", "list_sdk_versions", "read_sdk_docs", "search_sdk_docs"] and not search.is_error and not ask.is_error
    records = RequestRecord.objects.filter(channel="mcp")
    assert records.count() == 2 and {r.api_key_prefix for r in records} == {""}
    assert {r.transport for r in records} == {"http"}


def test_the_same_tools_over_stdio(kb):
    async def scenario():
        params = StdioServerParameters(command=sys.executable, args=["manage.py", "mcp_stdio"], env=project_env(),
                                       cwd=str(ROOT))
        async with Client(params) as client:
            return await call_both(client)

    tools, search, ask = asyncio.run(scenario())

    assert tools == ["ask_sdk_docs", "list_sdk_versions", "read_sdk_docs", "search_sdk_docs"]
    assert search.structured_content["results"][0]["class_name"] == "PerspectiveCamera"
    assert ask.structured_content["citations"]
    records = RequestRecord.objects.filter(channel="mcp").order_by("created_at")
    assert [(r.tool, r.transport, r.api_key_prefix) for r in records] == [
        ("search_sdk_docs", "stdio", ""), ("ask_sdk_docs", "stdio", "")]

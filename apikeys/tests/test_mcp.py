"""The MCP tools through the SDK's own client, connected in-process (no HTTP): names, schemas, structured
results with provenance, the web's evidence for the same question, tool errors, request records."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from mcp import Client

from apikeys.mcp.http import _origin_allowed, _tool_calls
from apikeys.mcp.server import build_server
from assistant.services import web_chat, web_search
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"


@pytest.fixture
def kb(corpus_copy, settings):
    settings.RAG_DEFAULT_KB = "sdk"
    built = make_built_kb(corpus_copy)
    _ = built.active_version  # loaded here: the async tests may not touch the database lazily
    return built


@pytest.mark.asyncio
async def test_the_tools_are_named_after_the_product_slug_and_describe_themselves(kb, settings):
    settings.RAG_PRODUCT_SLUG = "thingjs"

    async with Client(build_server(transport="stdio")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(tools) == {"search_thingjs_docs", "ask_thingjs_docs", "list_thingjs_versions", "read_thingjs_docs"}
    search, ask = tools["search_thingjs_docs"], tools["ask_thingjs_docs"]
    assert "ask_thingjs_docs" in search.description and "search_thingjs_docs" in ask.description
    assert search.input_schema["required"] == ["question"] and "top_k" in search.input_schema["properties"]
    assert "exclude" in ask.input_schema["properties"]
    assert "results" in search.output_schema["properties"] and "citations" in ask.output_schema["properties"]
    assert search.annotations.read_only_hint is True


def test_a_slug_that_cannot_name_a_tool_is_refused(settings):
    settings.RAG_PRODUCT_SLUG = "Thing JS"

    with pytest.raises(ImproperlyConfigured):
        build_server()


@pytest.mark.asyncio
async def test_search_returns_chunks_with_provenance_and_records_the_call(kb):
    async with Client(build_server(transport="stdio")) as client:
        result = await client.call_tool("search_sdk_docs", {"question": QUESTION, "top_k": 3})

    data = result.structured_content
    assert not result.is_error
    assert (data["kb"], data["index_version"]) == ("sdk", kb.active_version.name)
    assert data["index_built_at"] == kb.active_version.built_at.isoformat()
    assert data["results"][0]["class_name"] == "PerspectiveCamera"
    assert data["results"][0]["source"] == "PerspectiveCamera.md" and data["results"][0]["text"]
    text = result.content[0].text
    assert data["results"][0]["chunk_id"] in text and kb.active_version.name in text
    record = await RequestRecord.objects.aget(request_id=data["request_id"])
    assert (record.channel, record.kind, record.tool, record.transport) == ("mcp", "search", "search_sdk_docs",
                                                                           "stdio")
    assert record.arguments == {"question": QUESTION, "top_k": 3, "kb": "sdk"}
    assert [a["chunk_id"] for a in record.adopted] == [r["chunk_id"] for r in data["results"]]
    assert record.api_key_prefix == "" and record.error_code == ""


@pytest.mark.asyncio
async def test_the_same_question_gets_the_same_evidence_as_the_web_assistant(kb):
    from channels.db import database_sync_to_async

    web = await database_sync_to_async(web_search)(question=QUESTION)
    web_answer = await database_sync_to_async(web_chat)(question=QUESTION)
    async with Client(build_server(transport="stdio")) as client:
        search = (await client.call_tool("search_sdk_docs", {"question": QUESTION})).structured_content
        ask = (await client.call_tool("ask_sdk_docs", {"question": QUESTION})).structured_content

    assert [r["chunk_id"] for r in search["results"]] == [r["chunk_id"] for r in web["results"]]
    assert ask["evidence"] == [r["chunk_id"] for r in web["results"]]
    assert ask["answer"] == web_answer["answer"]
    assert [c["chunk_id"] for c in ask["citations"]] == [c["chunk_id"] for c in web_answer["citations"]]


@pytest.mark.asyncio
async def test_ask_answers_with_citations_and_can_leave_a_chunk_out(kb):
    async with Client(build_server(transport="stdio")) as client:
        first = (await client.call_tool("ask_sdk_docs", {"question": QUESTION})).structured_content
        left_out = first["citations"][0]["chunk_id"]
        again = await client.call_tool("ask_sdk_docs", {"question": QUESTION, "exclude": [left_out]})

    assert first["confidence"] in {"high", "medium", "low"} and first["mode"] == "extractive"
    assert first["degraded"] is False and first["citations"][0]["source"] == "PerspectiveCamera.md"
    assert left_out not in again.structured_content["evidence"]
    assert "Sources:" in again.content[0].text
    record = await RequestRecord.objects.aget(request_id=again.structured_content["request_id"])
    assert (record.kind, record.tool, record.arguments["exclude"]) == ("chat", "ask_sdk_docs", [left_out])
    assert left_out in record.excluded


@pytest.mark.asyncio
async def test_chitchat_comes_back_empty_with_a_reason_in_the_text(kb):
    async with Client(build_server(transport="stdio")) as client:
        result = await client.call_tool("search_sdk_docs", {"question": "你好，今天天气怎么样？"})

    assert result.structured_content["results"] == []
    assert result.structured_content["plan"]["kind"] == "chitchat"
    assert "not about the documentation" in result.content[0].text


@pytest.mark.asyncio
async def test_errors_are_tool_errors_and_the_session_goes_on(kb):
    async with Client(build_server(transport="stdio")) as client:
        unknown_kb = await client.call_tool("search_sdk_docs", {"question": "fov", "kb": "nope"})
        too_long = await client.call_tool("ask_sdk_docs", {"question": "x" * 5000})
        bad_top_k = await client.call_tool("search_sdk_docs", {"question": "fov", "top_k": 0})
        still_fine = await client.call_tool("search_sdk_docs", {"question": QUESTION})

    assert unknown_kb.is_error and "kb_not_found" in unknown_kb.content[0].text
    assert too_long.is_error and "question_too_long" in too_long.content[0].text
    assert bad_top_k.is_error and "invalid_top_k" in bad_top_k.content[0].text
    assert not still_fine.is_error
    failed = await RequestRecord.objects.aget(channel="mcp", error_code="kb_not_found")
    assert failed.arguments["kb"] == "nope" and failed.tool == "search_sdk_docs"


@pytest.mark.asyncio
async def test_arguments_of_the_wrong_kind_are_recorded_failures_with_a_stable_code(kb):
    async with Client(build_server(transport="stdio")) as client:
        results = [
            await client.call_tool("search_sdk_docs", {"question": 42}),
            await client.call_tool("search_sdk_docs", {"question": "fov", "top_k": "many"}),
            await client.call_tool("ask_sdk_docs", {"question": "fov", "exclude": "abc"}),
            await client.call_tool("ask_sdk_docs", {"question": "fov", "kb": ["a", "b"]}),
        ]

    assert all(r.is_error for r in results)
    codes = [r.content[0].text.split(": ")[1] for r in results]
    assert codes == ["invalid_question", "invalid_top_k", "invalid_exclude", "invalid_kb"]
    recorded = [r async for r in RequestRecord.objects.filter(channel="mcp").order_by("created_at")]
    assert [r.error_code for r in recorded] == codes
    assert recorded[0].arguments["question"] == 42 and recorded[2].arguments["exclude"] == "abc"


def test_origins_match_exactly_or_by_any_port_of_a_host():
    patterns = ["http://localhost:*", "https://ide.example.com"]

    assert _origin_allowed("http://localhost:5173", patterns)
    assert _origin_allowed("https://ide.example.com", patterns)
    assert not _origin_allowed("http://localhost.evil.com:80", patterns)
    assert not _origin_allowed("http://localhost", patterns)  # ":*" means some port
    assert not _origin_allowed("https://ide.example.com:8443", patterns)
    assert not _origin_allowed("null", patterns)


def test_the_gate_finds_calls_of_our_tools_in_single_and_batched_messages():
    names = ("search_sdk_docs", "ask_sdk_docs")
    call = b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ask_sdk_docs","arguments":{}}}'
    other = b'{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"something_else"}}'

    assert [m["id"] for m in _tool_calls(call, names)] == [3]
    assert [m["id"] for m in _tool_calls(b"[" + call + b"," + other + b"]", names)] == [3]
    assert _tool_calls(other, names) == []
    assert _tool_calls(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', names) == []
    assert _tool_calls(b"not json", names) == []


@pytest.mark.asyncio
async def test_under_a_server_that_sends_lifespan_events_the_session_manager_runs_from_startup_to_shutdown():
    from apikeys.mcp.http import McpHttpApp

    app = McpHttpApp()
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: list = []

    async def send(message):
        outbox.append(message["type"])

    await inbox.put({"type": "lifespan.startup"})
    running = asyncio.create_task(app({"type": "lifespan"}, inbox.get, send))
    while not outbox:
        await asyncio.sleep(0.01)
    started = app.manager._task_group is not None
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(running, 10)

    assert outbox == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert started and app.manager._task_group is None


def _holds_nul(record: RequestRecord) -> bool:
    """Whether any field of a stored record, text or JSON, holds a NUL (JSON escapes one as \\u0000)."""
    values = {field.attname: getattr(record, field.attname) for field in record._meta.concrete_fields}
    return "\\u0000" in json.dumps(values, default=str)


@pytest.mark.asyncio
async def test_a_nul_character_in_an_mcp_argument_is_refused_with_a_stable_code_and_never_stored(kb):
    async with Client(build_server(transport="stdio")) as client:
        results = [
            await client.call_tool("search_sdk_docs", {"question": "fov\x00"}),
            await client.call_tool("search_sdk_docs", {"question": "fov", "kb": "sdk\x00"}),
            await client.call_tool("ask_sdk_docs", {"question": "fov", "exclude": ["a\x00b"]}),
            await client.call_tool("ask_sdk_docs", {"question": "fov", "kb": "\x00"}),
        ]

    codes = [r.content[0].text.split(": ")[1] if r.is_error else "" for r in results]
    assert codes == ["invalid_question", "invalid_kb", "invalid_exclude", "invalid_kb"]
    recorded = [r async for r in RequestRecord.objects.filter(channel="mcp").order_by("created_at")]
    assert [r.error_code for r in recorded] == codes
    assert not any(_holds_nul(r) for r in recorded)
    assert recorded[2].arguments["exclude"] == ["a\ufffdb"]  # recorded as asked, the NUL made visible


@pytest.mark.asyncio
async def test_unknown_mcp_arguments_are_ignored_and_not_recorded(kb):
    async with Client(build_server(transport="stdio")) as client:
        search = await client.call_tool("search_sdk_docs", {"question": QUESTION, "top_k": 2, "page": 3})
        ask = await client.call_tool("ask_sdk_docs", {"question": QUESTION, "temperature": 0.9, "kb": "sdk"})

    assert not search.is_error and not ask.is_error
    assert len(search.structured_content["results"]) == 2
    records = [r async for r in RequestRecord.objects.filter(channel="mcp").order_by("created_at")]
    assert [r.arguments for r in records] == [{"question": QUESTION, "top_k": 2, "kb": "sdk"},
                                              {"question": QUESTION, "exclude": [], "kb": "sdk"}]


def test_a_nul_character_in_the_arguments_of_a_call_the_gate_refused_is_never_stored(db, owner):
    from apikeys.mcp.service import Caller, mcp_refusal_record
    from infra.errors import ServiceError

    mcp_refusal_record(caller=Caller(key_prefix="rkabc", transport="http"), tool="ask_sdk_docs",
                       arguments={"question": "fov\x00", "kb": "sdk\x00", "exclude": ["a\x00"], "x\x00": {"y": "\x00"}},
                       error=ServiceError("rate_limited", "Slow down.", status=429))

    record = RequestRecord.objects.get(error_code="rate_limited")
    assert not _holds_nul(record)
    assert (record.question, record.kb, record.arguments["exclude"]) == ("fov\ufffd", "sdk\ufffd", ["a\ufffd"])

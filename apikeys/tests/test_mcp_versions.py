"""Issue 32 on MCP, through the SDK's own client: the `sdk_version` argument of both tools, the versions tool, the
version every result names, the added/removed notes, and the error naming the versions that are indexed."""

from __future__ import annotations

import pytest
from mcp import Client

from apikeys.mcp.server import build_server
from rag.models import RequestRecord
from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sdk(tmp_path, settings):
    settings.RAG_DEFAULT_KB = "fx"
    return build_sdk(tmp_path)


@pytest.mark.asyncio
async def test_the_tools_take_a_version_and_say_which_they_read(sdk):
    async with Client(build_server(transport="stdio")) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        latest = await client.call_tool("search_sdk_docs", {"question": "How do I resize the viewer canvas?"})
        older = await client.call_tool("search_sdk_docs", {"question": "How do I resize the viewer canvas?",
                                                           "sdk_version": "1.4"})

    assert "sdk_version" in tools["search_sdk_docs"].input_schema["properties"]
    assert "sdk_version" in tools["ask_sdk_docs"].input_schema["properties"]
    assert (latest.structured_content["kb"], latest.structured_content["sdk_version"]) == ("fx@2.1", "2.1")
    assert (older.structured_content["kb"], older.structured_content["sdk_version"]) == ("fx@1.4", "1.4")
    assert "SDK version 1.4" in older.content[0].text
    record = await RequestRecord.objects.aget(request_id=older.structured_content["request_id"])
    assert (record.kb, record.arguments["sdk_version"]) == ("fx@1.4", "1.4")


@pytest.mark.asyncio
async def test_ask_tells_what_the_asked_version_lacks_and_lists_versions(sdk):
    async with Client(build_server(transport="stdio")) as client:
        answer = await client.call_tool("ask_sdk_docs", {"question": "How do I call Viewer.dispose()?",
                                                         "sdk_version": "2.1"})
        versions = await client.call_tool("list_sdk_versions", {})

    data = answer.structured_content
    assert data["sdk_version"] == "2.1"
    assert data["answer"].startswith("`Viewer.dispose` was removed in 2.1 (last documented in 2.0)")
    assert [(n["kind"], n["since"]) for n in data["version_notes"]] == [("removed", "2.1")]
    listed = versions.structured_content
    assert listed["default"] == "2.1" and [v["version"] for v in listed["versions"]] == ["1.4", "2.0", "2.1"]
    assert listed["versions"][1]["changes"]["renamed"] == 1


@pytest.mark.asyncio
async def test_a_version_that_is_not_indexed_is_a_tool_error_naming_those_that_are(sdk):
    async with Client(build_server(transport="stdio")) as client:
        result = await client.call_tool("search_sdk_docs", {"question": "Viewer", "sdk_version": "3.0"})

    assert result.is_error
    assert "sdk_version_not_found" in result.content[0].text and "1.4, 2.0, 2.1" in result.content[0].text


@pytest.mark.asyncio
async def test_version_is_another_name_of_sdk_version_and_never_ignored(sdk):
    async with Client(build_server(transport="stdio")) as client:
        named = await client.call_tool("search_sdk_docs", {"question": "Viewer setSize", "version": "2.0"})
        clash = await client.call_tool("ask_sdk_docs", {"question": "Viewer", "version": "2.0", "sdk_version": "1.4"})

    assert named.structured_content["sdk_version"] == "2.0"
    assert clash.is_error and "invalid_sdk_version" in clash.content[0].text
    assert await RequestRecord.objects.filter(error_code="invalid_sdk_version").acount() == 1

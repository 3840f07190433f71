"""MCP resources (knowledge bases, their pages, a page) and prompt templates ("explain this API", "migrate from
version A to B"), through the SDK's own client; reading them spends no tool call on a key."""

from __future__ import annotations

import json

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from apikeys.mcp.server import build_server
from rag.models import RequestRecord
from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kb(sdk_default_kb):
    return sdk_default_kb


@pytest.fixture
def sdk(tmp_path, settings):
    settings.RAG_DEFAULT_KB = "fx"
    return build_sdk(tmp_path)


def _text(result) -> str:
    return result.contents[0].text


@pytest.mark.asyncio
async def test_the_knowledge_bases_their_pages_and_a_page_are_resources(kb, corpus_copy):
    async with Client(build_server(transport="stdio")) as client:
        listed = {str(r.uri): r for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        bases = json.loads(_text(await client.read_resource("docs://knowledge-bases")))
        pages = json.loads(_text(await client.read_resource("docs://sdk/pages")))
        fog = next(p for p in pages["pages"] if p["path"] == "Fog.md")
        page = _text(await client.read_resource(fog["uri"]))

    assert "docs://knowledge-bases" in listed and listed["docs://knowledge-bases"].mime_type == "application/json"
    assert templates == {"docs://{kb}/pages", "docs://{kb}/pages/{+path}"}
    base = next(b for b in bases["knowledge_bases"] if b["kb"] == "sdk")
    assert base["index_version"] == kb.active_version.name and base["pages"] == len(pages["pages"]) > 5
    assert base["pages_uri"] == "docs://sdk/pages" and base["sdk_versions"] == []
    assert fog["uri"] == "docs://sdk/pages/Fog.md" and fog["title"]
    assert page.strip() == (corpus_copy / "Fog.md").read_text(encoding="utf-8").strip()
    assert not await RequestRecord.objects.aexists()  # reading resources asks no question


@pytest.mark.asyncio
async def test_a_page_resource_refuses_what_the_read_tool_refuses(kb):
    async with Client(build_server(transport="stdio")) as client:
        with pytest.raises(MCPError, match="source_not_found"):
            await client.read_resource("docs://sdk/pages/Nope.md")
        with pytest.raises(MCPError):
            await client.read_resource("docs://sdk/pages/../../etc/passwd")
        with pytest.raises(MCPError, match="kb_not_found"):
            await client.read_resource("docs://nowhere/pages")


@pytest.mark.asyncio
async def test_the_explain_prompt_names_the_tools_and_the_api(kb):
    async with Client(build_server(transport="stdio")) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        result = await client.get_prompt("explain_api", {"name": "Fog.density"})

    assert {"explain_api", "migrate_versions"} <= set(prompts)
    assert [a.name for a in prompts["explain_api"].arguments] == ["name", "kb"]
    assert prompts["explain_api"].arguments[0].required and not prompts["explain_api"].arguments[1].required
    text = result.messages[0].content.text
    assert result.messages[0].role == "user"
    assert "`Fog.density`" in text and "search_sdk_docs" in text and "read_sdk_docs" in text


@pytest.mark.asyncio
async def test_the_migrate_prompt_holds_what_changed_between_the_versions(sdk):
    async with Client(build_server(transport="stdio")) as client:
        result = await client.get_prompt("migrate_versions", {"from_version": "2.0", "to_version": "latest"})
        bases = json.loads(_text(await client.read_resource("docs://knowledge-bases")))
        with pytest.raises(MCPError, match="sdk_version_not_found"):
            await client.get_prompt("migrate_versions", {"from_version": "0.9", "to_version": "2.1"})

    text = result.messages[0].content.text
    assert "from" in text and "2.0 to 2.1" in text
    assert "- Removed: Viewer.dispose" in text  # the fixture's 2.1 removes it
    assert "sdk_version '2.1'" in text
    fx = next(b for b in bases["knowledge_bases"] if b["kb"] == "fx")
    assert fx["sdk_versions"] == ["1.4", "2.0", "2.1"] and fx["default_sdk_version"] == "2.1"

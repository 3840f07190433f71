"""Issue 33 on MCP search, through the SDK's own client: a response holds its sections within `max_tokens`, cut at
block and sentence boundaries and never inside a code block, says how many tokens it holds, and a cursor pages
through the rest without repeating or skipping a section."""

from __future__ import annotations

import pytest
from mcp import Client

from apikeys.mcp.server import build_server
from rag.models import RequestRecord
from rag.pipeline import get_engine

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "WebGLRenderer shadowMap 怎么开启阴影？"


@pytest.fixture
def kb(sdk_default_kb):
    return sdk_default_kb


async def call(client, **arguments):
    result = await client.call_tool("search_sdk_docs", {"question": QUESTION, **arguments})
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.asyncio
async def test_a_small_budget_is_kept_and_the_cursor_pages_through_every_section_once(kb):
    counter = get_engine().token_counter
    async with Client(build_server(transport="stdio")) as client:
        whole = await call(client, max_tokens=20_000, top_k=8)
        pages = [await call(client, max_tokens=300, top_k=8)]
        while pages[-1]["cursor"] and len(pages) < 40:
            pages.append(await call(client, max_tokens=300, top_k=8, cursor=pages[-1]["cursor"]))

    assert whole["cursor"] is None or whole["left_out"]
    for page in pages:
        assert page["tokens"] <= page["max_tokens"] == 300
        assert sum(counter.count(r["text"]) for r in page["results"]) <= 300
        for result in page["results"]:
            assert result["text"].count("```") % 2 == 0  # never half a code block
    seen = [r["chunk_id"] for page in pages for r in page["results"]]
    assert all(r["text"] or r["dropped_code_blocks"] for page in pages for r in page["results"])
    first_eight = [r["chunk_id"] for r in whole["results"]]
    assert list(dict.fromkeys(seen))[:len(first_eight)] == first_eight  # the same order, nothing skipped
    assert any(not r["complete"] for page in pages for r in page["results"])  # the shadow map's long section was cut
    record = await RequestRecord.objects.filter(arguments__max_tokens=300).order_by("-id").afirst()
    assert record is not None and record.error_code == ""


@pytest.mark.asyncio
async def test_a_bad_budget_or_cursor_is_a_recorded_tool_error(kb):
    async with Client(build_server(transport="stdio")) as client:
        tiny = await client.call_tool("search_sdk_docs", {"question": QUESTION, "max_tokens": 5})
        foreign = await client.call_tool("search_sdk_docs", {"question": QUESTION, "cursor": "bm90IG91cnM"})
        first = await call(client, max_tokens=150)
        other = await client.call_tool("search_sdk_docs", {"question": "Fog 的 near 是什么", "cursor": first["cursor"]})

    assert tiny.is_error and "invalid_max_tokens" in tiny.content[0].text
    assert foreign.is_error and "invalid_cursor" in foreign.content[0].text
    assert other.is_error and "invalid_cursor" in other.content[0].text  # a cursor belongs to its own question
    codes = [code async for code in RequestRecord.objects.exclude(error_code="").values_list("error_code", flat=True)]
    assert sorted(codes) == ["invalid_cursor", "invalid_cursor", "invalid_max_tokens"]


@pytest.mark.asyncio
async def test_the_read_tool_reads_a_result_s_section_then_its_page_within_budgets(kb):
    async with Client(build_server(transport="stdio")) as client:
        found = await call(client, top_k=1)
        link = found["results"][0]["link"]
        section = await client.call_tool("read_sdk_docs", {"source": link})
        page = [(await client.call_tool("read_sdk_docs", {"source": "WebGLRenderer.md", "max_tokens": 200}))
                .structured_content]
        while page[-1]["cursor"] and len(page) < 60:
            page.append((await client.call_tool("read_sdk_docs", {"source": "WebGLRenderer.md", "max_tokens": 200,
                                                                 "cursor": page[-1]["cursor"]})).structured_content)
        missing = await client.call_tool("read_sdk_docs", {"source": "WebGLRenderer.md#no-such-anchor"})

    assert "#" in link and section.structured_content["complete"] and section.structured_content["text"]
    assert section.structured_content["text"] in (await asyncio_read(kb, "WebGLRenderer.md"))
    assert all(part["tokens"] <= 200 for part in page) and page[-1]["cursor"] is None and len(page) > 2
    assert missing.is_error and "section_not_found" in missing.content[0].text


async def asyncio_read(kb, source: str) -> str:
    from pathlib import Path
    return (Path(kb.source_dir) / source).read_text(encoding="utf-8")


@pytest.mark.asyncio
async def test_ask_keeps_its_answer_and_packs_the_cited_texts_into_what_the_budget_leaves(kb):
    async with Client(build_server(transport="stdio")) as client:
        roomy = (await client.call_tool("ask_sdk_docs", {"question": QUESTION})).structured_content
        tight = (await client.call_tool("ask_sdk_docs", {"question": QUESTION, "max_tokens": 300})).structured_content

    assert roomy["max_tokens"] == 5000 and roomy["tokens"] <= 5000
    assert tight["answer"] == roomy["answer"] and tight["tokens"] <= max(300, get_engine().token_counter.count(
        tight["answer"]))
    assert [c["chunk_id"] for c in tight["citations"]] == [c["chunk_id"] for c in roomy["citations"]]
    assert any(not c["complete"] for c in tight["citations"])
    assert all(c["text"].count("```") % 2 == 0 for c in tight["citations"])

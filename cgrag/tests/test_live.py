"""End to end (slow): the CG_RAG API served by a real Daphne process, driven by real HTTP clients: JSON routes
with httpx2, rag/stream parsed event by event, capacity exhaustion inside a stream, a client that leaves
mid-answer, the MCP server at /cg-rag/mcp with the SDK's client, and Search-R1's batch retrieval. The
generation model and the rerank API are the real local fake servers of conftest.py."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time

import httpx2
import pytest
from django.contrib.auth import get_user_model

from apikeys.services import api_key_issue
from apikeys.tests.test_mcp_live import connect
from cgrag.tests.test_api import search_r1_batch_search
from infra.capacity import capacity_limiter
from rag.models import Channel, RequestRecord
from rag.tests.conftest import make_built_kb
from rag.tests.live import daphne

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"


def sse_events(response) -> list[tuple[str, dict]]:
    """Parse a text/event-stream body event by event (`event:` and `data:` lines, a blank line ends one)."""
    events, name, data = [], "message", []
    for line in response.iter_lines():
        if line == "":
            if data:
                events.append((name, json.loads("\n".join(data))))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    return events


@pytest.fixture
def kb(corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def served(kb, llm_server, rerank_server):
    """Daphne with a generation model, a rerank API, `full` as an alias of `sdk`, one generation slot."""
    llm_server.default_text = '{"indices": [1, 2]}'
    with daphne(RAG_GENERATION_BASE_URL=llm_server.url, RAG_GENERATION_MODEL="qwen-live",
                RAG_GENERATION_PROVIDER="deepseek", RAG_RERANK_BASE_URL=rerank_server.url, RAG_RERANK_MODEL="rr",
                RAG_CGRAG_SCOPE_ALIASES="full=sdk", RAG_CGRAG_STREAM_TOKEN_DELAY="0",
                RAG_CAPACITY_GENERATION_MAX="1", RAG_CAPACITY_WAIT_TIMEOUT="0.3") as url:
        yield url


def test_the_json_routes_over_http(served, llm_server, rerank_server, settings):
    with httpx2.Client(base_url=served, timeout=30) as http:
        health = http.get("/cg-rag/health", headers={"X-Request-ID": "req-doc-health"})
        assert health.headers["X-Request-ID"] == "req-doc-health" and health.json()["generation"]["provider"] == "deepseek"
        assert http.get("/cg-rag/profiles").json()["full"]["knowledge_base"] == "sdk"
        warm = http.post("/cg-rag/warmup", json={"scopes": ["full"]}).json()
        assert warm["final_active_scope"] == "sdk" and warm["warmed"][0]["resident"] is True
        retrieved = http.post("/cg-rag/retrieve-rerank", json={"query": QUESTION, "scope": "full", "topk": 2}).json()
        assert retrieved["num_docs"] == 2 and retrieved["pipeline"]["rerank_backend"] == "api"
        assert retrieved["pipeline"]["rerank_time_ms"] > 0 and retrieved["cache"]["hit"] is False
        again = http.post("/cg-rag/retrieve-rerank", json={"query": QUESTION, "scope": "full", "topk": 2}).json()
        assert again["cache"]["hit"] is True and again["cached_pipeline"]["rerank_backend"] == "api"
        generated = http.post("/cg-rag/constrained-generate", json={
            "query": QUESTION, "max_items": 2, "retrieval_docs": retrieved["retrieval_docs"]}).json()
        assert generated["ok"] is True and generated["pred_indices"] == [1, 2]
        assert llm_server.calls[-1]["body"]["thinking"] == {"type": "disabled"}
        answered = http.post("/cg-rag/answer", json={"query": QUESTION, "scope": "full", "topk": 20, "max_items": 5,
                                                     "generation_enable_thinking": True}).json()
        assert answered["generation"]["ok"] is True and answered["retrieval"]["num_docs"] == 20
        assert llm_server.calls[-1]["body"]["thinking"] == {"type": "enabled"}
        invalid = http.post("/cg-rag/rag", json={"query": "q", "include_debug": "true"})
        assert invalid.status_code == 400 and invalid.json()["error"]["details"]["errors"][0]["loc"] == ["include_debug"]
        legacy = http.post("/retrieve", json={"query": "雾的颜色", "topk": 5, "scope": "full"}).json()
        assert legacy["num_docs"] == 5 and legacy["pipeline"]["requested_scope"] == "full" and "cache" not in legacy
        assert http.get("/healthz").json()["store_topk"] == 78
    assert RequestRecord.objects.filter(channel=Channel.CGRAG).count() == 5  # warm-up and a refused body: none


def test_rag_stream_sends_progress_retrieval_tokens_and_final(served):
    with httpx2.Client(base_url=served, timeout=30) as http:
        with http.stream("POST", "/cg-rag/rag/stream", headers={"X-Request-ID": "req-doc-rag-stream"},
                         json={"query": QUESTION, "scope": "full", "topk": 20, "max_items": 5}) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["X-Request-ID"] == "req-doc-rag-stream"
            events = sse_events(response)
    names = [name for name, _ in events]
    assert names[:4] == ["progress", "progress", "retrieval", "progress"] and names[-1] == "final"
    assert events[0][1] == {"stage": "retrieval", "label": "正在检索", "status": "running",
                            "request_id": "req-doc-rag-stream"}
    assert events[3][1]["stage"] == "generation" and "error" not in names
    tokens = [data for name, data in events if name == "token"]
    assert tokens and all(t["channel"] == "answer" for t in tokens)
    final = events[-1][1]
    assert "".join(t["text"] for t in tokens) == final["generation"]["answer_text"]
    assert final["retrieval"]["num_docs"] == 20 and final["generation"]["pred_indices"] == [1, 2]
    assert final["query"] == QUESTION and final["request_id"] == "req-doc-rag-stream"


def test_capacity_exhausted_inside_a_stream_is_error_then_final_with_200(served, llm_server, settings):
    # This process's limiter is the server's: the same slot files under the shared data folder.
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "GENERATION_MAX_CONCURRENT": 1, "WAIT_TIMEOUT": 0.3}
    with capacity_limiter("generation").hold():  # the server's only generation slot  # the server's only generation slot
        with httpx2.Client(base_url=served, timeout=30) as http:
            with http.stream("POST", "/cg-rag/rag/stream", json={"query": QUESTION, "topk": 5}) as response:
                assert response.status_code == 200
                events = sse_events(response)
            busy = http.post("/cg-rag/rag", json={"query": QUESTION, "topk": 5})
    names = [name for name, _ in events]
    assert names[-2:] == ["error", "final"] and "retrieval" in names
    error = events[-2][1]
    assert error["code"] == "capacity.exceeded" and error["details"] == {"resource": "generation", "max": 1,
                                                                        "wait_timeout_seconds": 0.3}
    assert events[-1][1]["generation"]["error"]["code"] == "capacity.exceeded"
    assert busy.status_code == 429 and busy.headers["Retry-After"] == "1"
    assert busy.json()["error"]["category"] == "capacity" and llm_server.calls == []


def test_a_client_that_leaves_mid_answer_cancels_the_model_call(served, llm_server):
    llm_server.replies = [("drip", '{"indices": [1' + ", 1" * 60 + "]}")]
    with httpx2.Client(base_url=served, timeout=30) as http:
        with http.stream("POST", "/cg-rag/rag/stream", json={"query": QUESTION, "topk": 5}) as response:
            for line in response.iter_lines():
                if '"stage": "generation"' in line or '"stage":"generation"' in line:
                    break
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not RequestRecord.objects.filter(outcome="cancelled").exists():
        time.sleep(0.1)
    assert RequestRecord.objects.get(channel=Channel.CGRAG).outcome == RequestRecord.Outcome.CANCELLED
    # The answer has ended: its model call was hung up on, or never made when the reader had left before it.
    deadline = time.monotonic() + 60
    while llm_server.calls and not llm_server.hung_up and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (llm_server.hung_up or not llm_server.calls) and len(llm_server.sent) < 60


def test_search_r1s_client_reads_the_batch_form(served):
    formatted = search_r1_batch_search(served + "/retrieve", ["fog color", "透视相机 视野"], topk=3)
    assert len(formatted) == 2 and formatted[0].startswith('Doc 1(Title: "') and "Doc 3(" in formatted[0]
    assert RequestRecord.objects.filter(channel=Channel.SEARCH_R1).count() == 2


def test_the_mcp_server_is_also_at_cg_rag_mcp(served):
    owner = get_user_model().objects.create_user("li.wei", password="x")
    _key, secret = api_key_issue(owner=owner, name="cg client")

    async def talk():
        http, client = connect(served + "/cg-rag", secret)
        async with http, client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            found = await client.call_tool("search_sdk_docs", {"question": QUESTION, "top_k": 2})
        return tools, found

    tools, found = asyncio.run(talk())
    assert "search_sdk_docs" in tools and not found.is_error

    async def refused():
        async with httpx2.AsyncClient() as raw:
            return await raw.post(served + "/cg-rag/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                  headers={"Accept": "application/json, text/event-stream"})
    response = asyncio.run(refused())
    assert response.status_code == 401 and "missing_api_key" in response.text


def curl_examples() -> list[tuple[str, str]]:
    """Every ```bash block of the CG_RAG pages (English and Chinese): (page, script)."""
    from rag.tests.live import ROOT

    examples = []
    for page in ("docs/en/cg-rag-api.md", "docs/zh/cg-rag-api.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        examples += [(page, block) for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]
    return examples


PNG_1X1 = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def test_every_curl_example_of_the_docs_works(llm_server, tmp_path):
    from rag.tests.live import ROOT

    make_built_kb(ROOT / "docs", slug="docs")  # the documentation itself (from its shipped vectors: seconds)
    llm_server.default_text = '{"indices": [1]}'
    examples = curl_examples()
    assert len(examples) == 2 * 11
    (tmp_path / "screenshot.png").write_bytes(PNG_1X1)  # the vision example's image
    with daphne(RAG_GENERATION_BASE_URL=llm_server.url, RAG_GENERATION_MODEL="m", RAG_DEFAULT_KB="docs",
                RAG_CGRAG_STREAM_TOKEN_DELAY="0") as url:
        for page, script in examples:
            run = subprocess.run(["bash", "-c", script.replace("http://127.0.0.1:8000", url)], capture_output=True,
                                 text=True, timeout=60, cwd=tmp_path)
            assert run.returncode == 0, (page, script, run.stderr)
            if "/stream" in script:
                assert run.stdout.rstrip().split("\n\n")[-1].startswith("event: final"), (page, script, run.stdout)
                continue
            body = json.loads(run.stdout)
            if "/vision/" in script:  # make run has no multimodal model: the documented 503
                assert body["error"]["code"] == "vision_not_configured", (page, body)
                continue
            assert "error" not in body and body.get("ok", True) is not False, (page, script, body)
            if "retrieval" in body:  # rag: the model chose
                assert body["generation"]["ok"] is True and body["retrieval"]["num_docs"] == 20, (page, body)


def test_concurrent_generations_beyond_the_limit_get_429(served, llm_server):
    from concurrent.futures import ThreadPoolExecutor

    llm_server.delay = 1.5
    llm_server.replies = [("slow", '{"indices": [1]}')] * 4
    body = {"query": QUESTION, "retrieval_docs": [{"law_name": "Fog", "article_number": ".far", "contents": "far"}]}

    def call(_):
        with httpx2.Client(base_url=served, timeout=30) as http:
            return http.post("/cg-rag/constrained-generate", json=body)

    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(call, range(4)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 429, 429, 429], statuses
    assert all(r.json()["error"]["details"]["resource"] == "generation" for r in responses if r.status_code == 429)
    with httpx2.Client(base_url=served, timeout=30) as http:
        generation = http.get("/cg-rag/health").json()["capacity"]["generation"]
    assert generation["rejected"] == 3 and generation["peak"] == 1 and generation["active"] == 0

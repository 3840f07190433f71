"""The CG_RAG face in process (Django's test client): every text route's fields, defaults, ranges and error
codes as seed 004 gives them, over the fixture corpus as scope `sdk` (alias `full`), with the real local fake
servers of conftest.py for the generation model and the rerank API."""

from __future__ import annotations

import json
import threading

import pytest

from infra.capacity import capacity_limiter
from rag.models import Channel, RequestRecord
from rag.services.knowledge import index_build

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"


def post(client, path: str, body, **headers):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(path, data=data, content_type="application/json", **headers)


def errors_of(response) -> list[dict]:
    body = response.json()
    assert response.status_code == 400 and body["error"]["code"] == "invalid_request", body
    assert set(body) == {"request_id", "error"}
    return body["error"]["details"]["errors"]


@pytest.fixture
def model(llm_server, engine_settings):
    """A generation model configured (the fake server), provider as detected (openai-compatible)."""
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="qwen-test")
    llm_server.default_text = '{"indices": [1]}'
    return llm_server


# -- request ids, health, profiles -----------------------------------------------------------------------


def test_a_valid_request_id_is_echoed_and_an_invalid_one_replaced(client, sdk_kb):
    assert client.get("/cg-rag/health", HTTP_X_REQUEST_ID="req-doc-health")["X-Request-ID"] == "req-doc-health"
    for bad in ("has space", "x" * 129, "中文"):
        response = client.get("/cg-rag/health", HTTP_X_REQUEST_ID=bad)
        assert response["X-Request-ID"].startswith("req_") and response.json()["request_id"] == response["X-Request-ID"]
    response = post(client, "/cg-rag/retrieve-rerank", {"query": ""}, HTTP_X_REQUEST_ID="req-1")
    assert response["X-Request-ID"] == "req-1" and response.json()["request_id"] == "req-1"


def test_health_names_scopes_models_cache_capacity_and_hides_secrets(client, sdk_kb, model, engine_settings,
                                                                     rerank_server, settings):
    engine_settings(GENERATION_API_KEY="sk-secret-generation", RERANK_BASE_URL=rerank_server.url,
                    RERANK_MODEL="rr", RERANK_API_KEY="sk-secret-rerank")
    settings.RAG_CGRAG = {**settings.RAG_CGRAG, "SCOPE_ALIASES": {"full": "sdk"}}
    response = client.get("/cg-rag/health")
    body = response.json()
    assert "sk-secret" not in response.content.decode() and model.url not in response.content.decode()
    assert body["ok"] is True and body["service"] == "CG_RAG" and body["mcp_path"] == "/cg-rag/mcp"
    assert body["available_scopes"] == ["sdk", "full"] and body["default_scope"] == "sdk"
    assert body["generation"]["configured"] is True and body["generation"]["endpoint_host"] == "127.0.0.1"
    assert body["generation"]["provider"] == "openai" and body["generation"]["default_max_items"] == 10
    assert body["generation"]["max_context_docs"] == 78 and body["config_issues"] == []
    assert body["vision"]["configured"] is False and body["vision"]["max_images"] == 4
    assert body["rerank"] == {"api_enabled": True, "model": "rr", "backend": "api"}
    assert set(body["retriever"]) == {"active_scope", "resident_scopes", "load_count", "last_load_time_ms",
                                      "last_loaded_scope"}
    assert len(body["profile_fingerprint"]["id"]) == 16
    files = body["profile_fingerprint"]["summary"]["index_files"]
    assert files and all(set(f) == {"name", "size", "mtime"} and "/" not in f["name"] for f in files)
    assert set(body["retrieve_cache"]) == {"entries", "hits", "misses", "max_entries", "ttl_seconds"}
    assert body["capacity"]["generation"] == {"resource": "generation", "max": 16, "active": 0, "queued": 0,
                                              "rejected": 0, "peak": 0, "wait_timeout_seconds": 5.0}


def test_health_lists_what_is_not_configured(client, sdk_kb):
    body = client.get("/cg-rag/health").json()
    assert [issue["code"] for issue in body["config_issues"]] == ["generation_not_configured"]
    assert body["generation"]["configured"] is False and body["generation"]["endpoint_host"] == ""


def test_profiles_is_the_bare_map_with_aliases(client, sdk_kb, settings):
    settings.RAG_CGRAG = {**settings.RAG_CGRAG, "SCOPE_ALIASES": {"full": "sdk", "usual": "missing"}}
    body = client.get("/cg-rag/profiles").json()
    assert body == {"sdk": {"label": "sdk", "retrieval_method": sdk_kb.active_version.model_id},
                    "full": {"label": "sdk", "retrieval_method": sdk_kb.active_version.model_id,
                             "knowledge_base": "sdk"}}


def test_wrong_method_is_405_in_the_envelope(client, sdk_kb):
    response = client.get("/cg-rag/rag")
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    assert response["Allow"] == "POST"


# -- retrieve-rerank ---------------------------------------------------------------------------------------


def test_retrieve_rerank_returns_candidates_in_the_seed_names(client, sdk_kb):
    response = post(client, "/cg-rag/retrieve-rerank", {"query": f"  {QUESTION} ", "scope": "sdk", "topk": 4},
                    HTTP_X_REQUEST_ID="req-doc-retrieve")
    body = response.json()
    assert response.status_code == 200 and body["request_id"] == "req-doc-retrieve"
    assert body["query"] == QUESTION and body["topk"] == 4 and body["num_docs"] == 4 == len(body["retrieval_docs"])
    first = body["retrieval_docs"][0]
    assert {"law_name", "article_number", "contents", "chunk_id", "source", "class_name", "member", "score"} <= set(first)
    assert first["class_name"] == "PerspectiveCamera" and first["law_name"].startswith("透视相机")
    assert len({doc["chunk_id"] for doc in body["retrieval_docs"]}) == 4
    pipeline = body["pipeline"]
    assert pipeline["requested_scope"] == "sdk" and pipeline["active_scope"] == "sdk"
    assert pipeline["rerank_backend"] == "none" and pipeline["rerank_enabled"] is False
    assert pipeline["search_total_time_ms"] == pytest.approx(pipeline["retrieval_time_ms"] + pipeline["rerank_time_ms"])
    assert body["profile_fingerprint"] == pipeline["profile_fingerprint"] == body["profile_fingerprint"]
    assert body["cache"]["hit"] is False and body["profile_fingerprint_summary"]["scope"] == "sdk"
    record = RequestRecord.objects.get(channel=Channel.CGRAG)
    assert record.kind == RequestRecord.Kind.SEARCH and record.question == QUESTION


def test_topk_defaults_to_78_and_lists_more_than_the_answer_uses(client, sdk_kb):
    body = post(client, "/cg-rag/retrieve-rerank", {"query": "相机"}).json()
    assert body["topk"] == 78 and body["pipeline"]["requested_scope"] == "sdk"
    assert 10 < body["num_docs"] <= 78 and len({doc["chunk_id"] for doc in body["retrieval_docs"]}) == body["num_docs"]


@pytest.mark.parametrize(("body", "loc", "kind"), [
    ({}, ["query"], "missing"),
    ({"query": "   "}, ["query"], "string_too_short"),
    ({"query": 3}, ["query"], "string_type"),
    ({"query": "fog", "topk": 0}, ["topk"], "greater_than_equal"),
    ({"query": "fog", "topk": 201}, ["topk"], "less_than_equal"),
    ({"query": "fog", "topk": "3"}, ["topk"], "int_type"),
    ({"query": "fog", "topk": True}, ["topk"], "int_type"),
    ({"query": "fog", "topk": 2.5}, ["topk"], "int_type"),
    ({"query": "fog", "scope": "nowhere"}, ["scope"], "scope_not_found"),
    ({"query": "fog", "max_tokens": 99}, ["max_tokens"], "greater_than_equal"),
    ({"query": "fog", "max_tokens": "500"}, ["max_tokens"], "int_type"),
    ({"query": "fog", "cursor": 3}, ["cursor"], "string_type"),
])
def test_retrieve_rerank_validation(client, sdk_kb, body, loc, kind):
    errors = errors_of(post(client, "/cg-rag/retrieve-rerank", body))
    assert errors[0]["loc"] == loc and errors[0]["type"] == kind and errors[0]["message"]
    assert not RequestRecord.objects.exists()


def test_retrieve_rerank_packs_its_candidates_into_max_tokens_and_pages_on_with_a_cursor(client, sdk_kb):
    query = {"query": "WebGLRenderer shadowMap 怎么开启阴影？", "topk": 20}
    whole = post(client, "/cg-rag/retrieve-rerank", query).json()
    first = post(client, "/cg-rag/retrieve-rerank", {**query, "max_tokens": 300}).json()
    second = post(client, "/cg-rag/retrieve-rerank", {**query, "max_tokens": 300, "cursor": first["cursor"]}).json()

    assert "tokens" not in whole and whole["num_docs"] == 20  # the seed's shape without a budget
    assert first["tokens"] <= 300 and first["max_tokens"] == 300 and first["cursor"] and first["left_out"]
    assert first["num_docs"] == len(first["retrieval_docs"]) < 20
    assert first["retrieval_docs"][0]["chunk_id"] == whole["retrieval_docs"][0]["chunk_id"]
    assert all("complete" in doc and "dropped_code_blocks" in doc for doc in first["retrieval_docs"])
    assert second["retrieval_docs"][0]["rank"] >= first["retrieval_docs"][-1]["rank"] and second["tokens"] <= 300
    other = post(client, "/cg-rag/retrieve-rerank", {"query": "Fog 的颜色", "max_tokens": 300,
                                                     "cursor": first["cursor"]})
    assert other.status_code == 400 and other.json()["error"]["code"] == "invalid_cursor"


def test_a_body_that_is_not_json_is_invalid_request(client, sdk_kb):
    assert errors_of(post(client, "/cg-rag/retrieve-rerank", "{not json"))[0]["type"] == "json_invalid"
    assert errors_of(post(client, "/cg-rag/retrieve-rerank", "[1]"))[0]["type"] == "model_type"


def test_the_cache_hits_on_the_same_stripped_query_and_misses_after_a_reindex(client, sdk_kb):
    first = post(client, "/cg-rag/retrieve-rerank", {"query": QUESTION, "topk": 5}).json()
    second = post(client, "/cg-rag/retrieve-rerank", {"query": f" {QUESTION}  ", "topk": 5}).json()
    assert first["cache"]["hit"] is False and second["cache"]["hit"] is True
    assert second["cache"]["hits"] == 1 and second["cache"]["misses"] == 1 and second["cache"]["entries"] == 1
    assert second["cached_pipeline"]["search_total_time_ms"] == first["pipeline"]["search_total_time_ms"]
    assert second["retrieval_docs"] == first["retrieval_docs"] and "cached_pipeline" not in first
    assert post(client, "/cg-rag/retrieve-rerank", {"query": QUESTION, "topk": 6}).json()["cache"]["hit"] is False
    index_build(sdk_kb)  # a new active version: a new fingerprint
    third = post(client, "/cg-rag/retrieve-rerank", {"query": QUESTION, "topk": 5}).json()
    assert third["cache"]["hit"] is False and third["profile_fingerprint"] != first["profile_fingerprint"]
    assert RequestRecord.objects.filter(channel=Channel.CGRAG).count() == 4  # hits are recorded too


def test_rerank_api_orders_the_candidates_and_is_timed(client, sdk_kb, engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="rr")
    body = post(client, "/cg-rag/retrieve-rerank", {"query": "fog color near far", "topk": 5}).json()
    pipeline = body["pipeline"]
    assert pipeline["rerank_backend"] == "api" and pipeline["api_rerank_enabled"] is True
    assert pipeline["rerank_time_ms"] > 0 and rerank_server.calls
    assert body["profile_fingerprint_summary"]["rerank"]["backend"] == "api"


def test_a_failing_rerank_api_falls_back_to_the_fused_order_and_says_so(client, sdk_kb, engine_settings,
                                                                          rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="rr")
    rerank_server.replies = [("500", None)]
    pipeline = post(client, "/cg-rag/retrieve-rerank", {"query": "fog color", "topk": 3}).json()["pipeline"]
    assert pipeline["rerank_backend"] == "none" and pipeline["rerank_error"]


def test_unexpected_failures_are_500_service_error_without_internals(client, sdk_kb, monkeypatch):
    def explode(request):
        raise RuntimeError("/secret/path token=abc")

    monkeypatch.setattr("cgrag.views.question_search", explode)
    response = post(client, "/cg-rag/retrieve-rerank", {"query": "fog"}, HTTP_X_REQUEST_ID="req-x")
    assert response.status_code == 500 and "secret" not in response.content.decode()
    assert response.json() == {"request_id": "req-x", "error": {
        "code": "service_error", "message": "检索服务调用失败，请稍后重试或检查服务日志。", "details": {}}}


def test_a_scope_without_an_index_yet_is_the_services_error(client, db, settings):
    from rag.tests.conftest import make_kb

    make_kb(settings.BASE_DIR / "docs", slug="sdk")
    response = post(client, "/cg-rag/retrieve-rerank", {"query": "fog"})
    assert response.status_code in (409, 503) and response.json()["error"]["code"] in ("no_active_version",
                                                                                        "index_building")


# -- constrained generation ------------------------------------------------------------------------------

DOCS = [{"law_name": "雾（Fog）", "article_number": "属性 > .near", "contents": "雾开始出现的距离，默认 1。"},
        {"law_name": "雾（Fog）", "article_number": "属性 > .far", "contents": "雾完全遮住物体的距离，默认 1000。"}]


def test_constrained_generate_without_a_model_is_ok_false(client, sdk_kb):
    response = post(client, "/cg-rag/constrained-generate", {"query": "雾的默认远处距离？", "retrieval_docs": DOCS})
    assert response.status_code == 200
    body = response.json()
    assert body == {"request_id": body["request_id"], "ok": False, "error": {
        "code": "generation_not_configured", "message": "检索服务生成接口未配置，请检查服务配置。", "details": {}},
        "pred_indices": [], "pred_items": [], "pred_raw": ""}


def test_constrained_generate_chooses_among_the_given_candidates(client, db, model):
    model.default_text = '{"indices": [2]}'
    body = post(client, "/cg-rag/constrained-generate",
                {"query": "雾的默认远处距离？", "retrieval_docs": DOCS, "max_items": 2}).json()
    assert body["ok"] is True and body["generation_mode"] == "constrained"
    assert body["pred_indices"] == [2] and body["pred_items"] == ["雾（Fog） 属性 > .far"]
    assert body["answer_text"] == "我根据在线检索与候选筛选结果，整理出以下最相关条文：\n1. 雾（Fog） 属性 > .far"
    assert body["pred_raw"] == '{"indices": [2]}' and body["thinking"] == ""
    assert body["generation_enable_thinking"] is False and body["usage"]["total_tokens"] > 0
    assert "debug" not in body
    sent = model.calls[-1]["body"]
    assert sent["response_format"] == {"type": "json_object"} and "chat_template_kwargs" not in sent
    assert "thinking" not in sent and "雾完全遮住物体的距离" in sent["messages"][-1]["content"]
    record = RequestRecord.objects.get(channel=Channel.CGRAG)
    assert record.kind == RequestRecord.Kind.CHAT and record.outcome == RequestRecord.Outcome.OK and record.mode == "constrained"


def test_include_debug_adds_the_debug_fields(client, db, model):
    body = post(client, "/cg-rag/constrained-generate",
                {"query": "far?", "retrieval_docs": DOCS, "include_debug": True}).json()
    assert body["debug"]["num_candidates"] == 2 and body["debug"]["model"] == "qwen-test"


@pytest.mark.parametrize("reply", ['{"indices": [3]}', "the second one", '{"indices": "2"}', '{"picks": [1]}'])
def test_a_reply_that_is_not_valid_indices_is_generation_response_invalid(client, db, model, reply):
    model.default_text = reply
    body = post(client, "/cg-rag/constrained-generate", {"query": "far?", "retrieval_docs": DOCS}).json()
    assert body["ok"] is False and body["error"]["code"] == "generation_response_invalid"
    assert body["pred_indices"] == [] and body["pred_raw"] == reply


def test_a_model_that_times_out_is_ok_false_not_a_500(client, db, model, engine_settings):
    engine_settings(GENERATION_READ_TIMEOUT=1)
    model.delay = 1.5
    model.replies = [("slow", '{"indices": [1]}')]
    response = post(client, "/cg-rag/constrained-generate", {"query": "far?", "retrieval_docs": DOCS})
    assert response.status_code == 200 and response.json()["error"]["code"] == "generation_unavailable"


@pytest.mark.parametrize(("provider", "asked", "expected"), [
    ("deepseek", None, {"thinking": {"type": "disabled"}}),
    ("deepseek", True, {"thinking": {"type": "enabled"}}),
    ("openai", None, {}),
    ("openai", True, {"chat_template_kwargs": {"enable_thinking": True}}),
])
def test_thinking_is_sent_the_way_each_provider_reads_it(client, db, model, engine_settings, provider, asked,
                                                         expected):
    engine_settings(GENERATION_PROVIDER=provider)
    body = {"query": "far?", "retrieval_docs": DOCS}
    if asked is not None:
        body["generation_enable_thinking"] = asked
    reply = post(client, "/cg-rag/constrained-generate", body).json()
    sent = model.calls[-1]["body"]
    assert {name: sent[name] for name in ("thinking", "chat_template_kwargs") if name in sent} == expected
    assert reply["generation_enable_thinking"] is bool(asked)


@pytest.mark.parametrize(("field", "value"), [("include_debug", "true"), ("include_debug", 1),
                                              ("generation_enable_thinking", 0),
                                              ("generation_enable_thinking", "false"),
                                              ("max_items", 0), ("max_items", 21), ("max_items", "2")])
def test_booleans_are_strict_and_max_items_is_1_to_20(client, sdk_kb, model, field, value):
    for path, extra in (("/cg-rag/constrained-generate", {"retrieval_docs": DOCS}), ("/cg-rag/rag", {})):
        errors = errors_of(post(client, path, {"query": "far?", field: value, **extra}))
        assert errors[0]["loc"] == [field]
    assert model.calls == [] and not RequestRecord.objects.exists()


def test_retrieval_docs_are_required_and_checked(client, db):
    assert errors_of(post(client, "/cg-rag/constrained-generate", {"query": "q"}))[0]["loc"] == ["retrieval_docs"]
    errors = errors_of(post(client, "/cg-rag/constrained-generate", {"query": "q", "retrieval_docs": [{"law_name": 1}]}))
    assert {tuple(e["loc"]) for e in errors} == {("retrieval_docs", "0", "law_name"), ("retrieval_docs", "0", "contents")}


def test_constrained_generate_with_no_candidates_is_no_stable_article(client, db, model):
    body = post(client, "/cg-rag/constrained-generate", {"query": "far?", "retrieval_docs": []}).json()
    assert body["ok"] is False and body["error"]["code"] == "no_stable_article" and model.calls == []


# -- rag and answer ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/cg-rag/rag", "/cg-rag/answer"])
def test_rag_retrieves_then_chooses(client, sdk_kb, model, path):
    model.default_text = '{"indices": [1]}'
    body = post(client, path, {"query": QUESTION, "scope": "sdk", "topk": 20, "max_items": 5},
                HTTP_X_REQUEST_ID="req-doc-rag").json()
    assert body["request_id"] == "req-doc-rag" and body["query"] == QUESTION
    retrieval, generation = body["retrieval"], body["generation"]
    assert retrieval["topk"] == 20 and retrieval["num_docs"] == len(retrieval["retrieval_docs"]) > 5
    first = retrieval["retrieval_docs"][0]
    assert generation["ok"] is True and generation["pred_items"] == [f"{first['law_name']} {first['article_number']}"]
    offered = model.calls[-1]["body"]["messages"][-1]["content"]
    assert f"from 1 to {retrieval['num_docs']}" in offered and "at most 5" in offered
    records = RequestRecord.objects.filter(channel=Channel.CGRAG)
    assert records.count() == 1 and records.get().kind == RequestRecord.Kind.CHAT


def test_rag_without_a_model_still_returns_the_retrieval(client, sdk_kb):
    body = post(client, "/cg-rag/rag", {"query": QUESTION, "topk": 3}).json()
    assert body["retrieval"]["num_docs"] == 3 and body["generation"]["error"]["code"] == "generation_not_configured"


def test_rag_with_nothing_stable_does_not_call_the_model(client, sdk_kb, model):
    body = post(client, "/cg-rag/rag", {"query": "你好"}).json()
    assert body["retrieval"]["num_docs"] == 0 and body["retrieval"]["retrieval_docs"] == []
    assert body["generation"] == {"ok": False, "error": {"code": "no_stable_article",
                                                         "message": "当前在线候选中未稳定选出明确条文。", "details": {}},
                                  "pred_indices": [], "pred_items": [], "pred_raw": ""}
    assert model.calls == []


def test_generation_is_never_cached(client, sdk_kb, model):
    for _ in range(2):
        body = post(client, "/cg-rag/rag", {"query": QUESTION, "topk": 5}).json()
    assert body["retrieval"]["cache"]["hit"] is True and len(model.calls) == 2


def test_a_generation_slot_not_freed_in_time_is_429(client, sdk_kb, model, settings):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "GENERATION_MAX_CONCURRENT": 1, "WAIT_TIMEOUT": 0.2}
    with capacity_limiter("generation").hold():
        response = post(client, "/cg-rag/constrained-generate", {"query": "far?", "retrieval_docs": DOCS},
                        HTTP_X_REQUEST_ID="req-busy")
    assert response.status_code == 429 and response["Retry-After"] == "1"
    assert response.json() == {"request_id": "req-busy", "error": {
        "code": "capacity.exceeded", "category": "capacity", "retryable": True,
        "message": "服务当前请求过多，请稍后重试。",
        "details": {"resource": "generation", "max": 1, "wait_timeout_seconds": 0.2}}}
    assert model.calls == []
    stats = client.get("/cg-rag/health").json()["capacity"]["generation"]
    assert stats["rejected"] == 1 and stats["max"] == 1 and stats["peak"] >= 1
    assert RequestRecord.objects.get(channel=Channel.CGRAG).error_code == "capacity.exceeded"


def test_retrieval_has_its_own_limiter(client, sdk_kb, settings):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "RETRIEVAL_MAX_CONCURRENT": 1, "WAIT_TIMEOUT": 0.1}
    with capacity_limiter("generation").hold():  # generation's slots do not count
        assert post(client, "/cg-rag/retrieve-rerank", {"query": "fog"}).status_code == 200
    with capacity_limiter("retrieval").hold():
        response = post(client, "/cg-rag/retrieve-rerank", {"query": "fog again"})
    assert response.status_code == 429 and response.json()["error"]["details"]["resource"] == "retrieval"


def test_a_slot_freed_while_waiting_is_taken(client, sdk_kb, settings):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "RETRIEVAL_MAX_CONCURRENT": 1, "WAIT_TIMEOUT": 5.0}
    held, release = threading.Event(), threading.Event()

    def holder():
        with capacity_limiter("retrieval").hold():
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    threading.Timer(0.2, release.set).start()
    response = post(client, "/cg-rag/retrieve-rerank", {"query": "fog"})
    thread.join()
    assert response.status_code == 200
    assert client.get("/cg-rag/health").json()["capacity"]["retrieval"]["rejected"] == 0


# -- warmup and scopes -------------------------------------------------------------------------------------


def test_warmup_loads_in_order_and_leaves_the_last_active(client, sdk_kb, corpus_copy, settings):
    from rag.tests.conftest import make_built_kb

    make_built_kb(corpus_copy, slug="sdk2")
    settings.RAG_CGRAG = {**settings.RAG_CGRAG, "SCOPE_ALIASES": {"full": "sdk"}}
    body = post(client, "/cg-rag/warmup", {"scopes": ["full", "sdk2"]}, HTTP_X_REQUEST_ID="req-doc-warmup").json()
    assert body["ok"] is True and body["request_id"] == "req-doc-warmup"
    assert body["requested_scopes"] == ["full", "sdk2"] and body["warmed_scopes"] == ["full", "sdk2"]
    assert body["final_active_scope"] == "sdk2"
    assert body["warmed"][0] == {"requested_scope": "full", "normalized_scope": "sdk", "active_scope": "sdk",
                                 "warmed": True, "resident": True, "scope_switched": False}
    assert body["warmed"][1]["scope_switched"] is True
    health = client.get("/cg-rag/health").json()
    assert health["active_scope"] == "sdk2" and health["retriever"]["last_loaded_scope"] == "sdk2"
    assert set(health["retriever"]["resident_scopes"]) == {"sdk", "sdk2"}
    pipeline = post(client, "/cg-rag/retrieve-rerank", {"query": "fog", "scope": "full"}).json()["pipeline"]
    assert pipeline["scope_switched"] is True and pipeline["active_scope"] == "sdk"


def test_warmup_without_scopes_loads_every_scope_and_refuses_unknown_ones(client, sdk_kb):
    assert post(client, "/cg-rag/warmup", {}).json()["warmed_scopes"] == ["sdk"]
    errors = errors_of(post(client, "/cg-rag/warmup", {"scopes": ["sdk", "nowhere"]}))
    assert errors[0]["loc"] == ["scopes", "1"] and errors[0]["type"] == "scope_not_found"


# -- the legacy routes ------------------------------------------------------------------------------------


def test_healthz_is_the_seeds_liveness_summary(client, sdk_kb):
    body = client.get("/healthz").json()
    assert body == {"ok": True, "device": "cpu", "store_topk": 78, "available_scopes": ["sdk"],
                    "default_scope": "sdk", "active_scope": "sdk",
                    "retrieval_method": sdk_kb.active_version.model_id, "knowledge_bases_ready": 1}


def test_retrieve_is_lenient_and_echoes_the_requested_scope(client, sdk_kb):
    body = post(client, "/retrieve", {"query": "fog", "topk": "5", "scope": "sdk", "include_debug": "yes"}).json()
    assert body["num_docs"] == 5 and "cache" not in body and body["pipeline"]["requested_scope"] == "sdk"
    assert post(client, "/retrieve", {"query": "fog", "topk": 999}).json()["topk"] == 200
    body = post(client, "/retrieve", {"query": "fog", "topk": None}).json()
    assert body["topk"] == 78 and body["pipeline"]["requested_scope"] is None
    assert post(client, "/retrieve", {"topk": 3}).status_code == 400


def search_r1_batch_search(url: str, queries: list[str], topk: int) -> list[str]:
    """What Search-R1's generation loop does with a retrieval server (search_r1/llm_agent/generation.py):
    POST {"queries", "topk", "return_scores": True}, read `result`, and format each document by splitting
    `contents` into its first line (the title) and the rest."""
    import requests

    results = requests.post(url, json={"queries": queries, "topk": topk, "return_scores": True}).json()["result"]
    formatted = []
    for retrieval_result in results:
        text = ""
        for idx, doc_item in enumerate(retrieval_result):
            content = doc_item["document"]["contents"]
            title = content.split("\n")[0]
            body = "\n".join(content.split("\n")[1:])
            text += f"Doc {idx + 1}(Title: {title}) {body}\n"
        formatted.append(text)
    return formatted


def test_retrieve_answers_the_search_r1_batch_form(client, sdk_kb):
    body = post(client, "/retrieve", {"queries": ["fog color", "透视相机"], "topk": 3, "return_scores": True}).json()
    assert list(body) == ["result"] and [len(r) for r in body["result"]] == [3, 3]
    entry = body["result"][0][0]
    assert set(entry) == {"document", "score"} and set(entry["document"]) == {"id", "contents"}
    assert entry["document"]["contents"].startswith('"') and "\n" in entry["document"]["contents"]
    plain = post(client, "/retrieve", {"queries": ["fog color"], "topk": 2}).json()
    assert set(plain["result"][0][0]) == {"id", "contents"}
    assert RequestRecord.objects.filter(channel=Channel.SEARCH_R1).count() == 3
    assert post(client, "/retrieve", {"queries": []}).status_code == 400


def test_an_sse_frame_with_half_an_emoji_is_still_sent():
    from cgrag.http import sse_frame

    assert sse_frame("token", {"text": "ok \ud83d"}) == b'event: token\ndata: {"text": "ok \\ud83d"}\n\n'
    assert sse_frame("token", {"text": "好"}) == 'event: token\ndata: {"text": "好"}\n\n'.encode()


def test_the_ops_site_shows_cg_rag_requests(client, sdk_kb, model):
    from opsboard.tests.test_ops import ops_user

    rag = post(client, "/cg-rag/rag", {"query": QUESTION, "topk": 5}).json()
    assert rag["generation"]["ok"] is True
    record = RequestRecord.objects.get(channel=Channel.CGRAG)
    client.force_login(ops_user())
    page = client.get(f"/ops/requests/{record.request_id}")
    assert page.status_code == 200 and QUESTION in page.content.decode()
    assert "CG_RAG" in client.get("/ops/").content.decode()

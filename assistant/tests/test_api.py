"""The web assistant's JSON API over HTTP: search, chat (extractive and with a fake model), pool, feedback."""

from __future__ import annotations

import pytest

from assistant.models import Feedback, TokenPool
from assistant.services import WebTokenPool, token_pool_today
from conftest import local_moment
from infra.errors import ServiceError
from rag.models import RequestRecord
from rag.tests.conftest import documented_example

pytestmark = pytest.mark.django_db
# The web token pool is a local day's: its tests read it at a fixed moment (one crosses midnight on purpose).
POOL_DAY = pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)


def post(client, path, payload):
    return client.post(path, payload, content_type="application/json")


def test_search_returns_adopted_chunks_and_records_the_request(client, kb):
    response = post(client, "/api/search", {"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"})

    body = response.json()
    assert response.status_code == 200
    assert body["results"][0]["class_name"] == "PerspectiveCamera" and body["timings_ms"]["total"] > 0
    record = RequestRecord.objects.get(request_id=body["request_id"])
    assert (record.channel, record.kind, record.index_version) == ("web", "search", body["version"])
    assert record.adopted[0]["chunk_id"] == body["results"][0]["chunk_id"]


def test_chat_without_a_model_answers_extractively_with_citations(client, kb):
    response = post(client, "/api/chat", {"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"})

    body = response.json()
    assert response.status_code == 200
    assert set(body) >= {"answer", "citations", "confidence", "degraded", "mode", "request_id", "usage"}
    assert body["mode"] == "extractive" and body["citations"] and not body["degraded"]
    record = RequestRecord.objects.get(request_id=body["request_id"])
    assert record.mode == "extractive" and record.citations[0]["chunk_id"] == body["citations"][0]["chunk_id"]
    assert {"plan", "embed", "dense", "bm25", "fuse", "adopt", "generate"} <= set(record.timings)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_the_documented_chat_example_has_the_fields_chat_returns(client, kb, language):
    example = documented_example(f"{language}/http-api.md", "api_chat_example")

    body = post(client, "/api/chat", {"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"}).json()

    assert set(body) == set(example)
    assert set(body["citations"][0]) == set(example["citations"][0]) and set(body["usage"]) == set(example["usage"])


@pytest.mark.parametrize("payload", [
    {"question": 42}, {"question": ["a"]}, {"question": "fov", "top_k": True}, {"question": "fov", "top_k": "3"},
    {"question": "fov", "exclude": "abc"}, {"question": "fov", "kb": 7}, {},
])
def test_a_body_of_the_wrong_shape_is_a_400_and_is_not_a_question(client, kb, payload):
    response = post(client, "/api/search", payload)

    assert (response.status_code, response.json()["code"]) == (400, "invalid_request")
    assert RequestRecord.objects.count() == 0


@pytest.mark.parametrize("payload, code", [
    ({"question": ""}, "invalid_question"), ({"question": "   "}, "invalid_question"),
    ({"question": "x" * 2001}, "question_too_long"), ({"question": "fov", "top_k": 0}, "invalid_top_k"),
    ({"question": "fov", "top_k": 51}, "invalid_top_k"), ({"question": "fov", "exclude": [""]}, "invalid_exclude"),
    ({"question": "fov\x00"}, "invalid_question"), ({"question": "fov", "kb": ""}, "invalid_kb"),
])
def test_a_question_with_bad_values_is_a_400_with_the_service_code_and_a_failure_record(client, kb, payload, code):
    response = post(client, "/api/search", payload)

    body = response.json()
    assert (response.status_code, body["code"]) == (400, code)
    record = RequestRecord.objects.get()
    assert (record.channel, record.error_code, record.outcome) == ("web", code, "failed")
    assert body["request_id"] == record.request_id and "\x00" not in record.question


def test_an_unknown_knowledge_base_is_a_404(client, kb):
    response = post(client, "/api/chat", {"question": "fov", "kb": "nope"})

    assert (response.status_code, response.json()["code"]) == (404, "kb_not_found")


@POOL_DAY
def test_chat_with_a_model_cites_evidence_and_spends_the_pool(client, kb, with_model):
    with_model.default_text = "默认值是 50 [1]。"

    body = post(client, "/api/chat", {"question": "PerspectiveCamera 的 fov 默认值", "kb": "sdk"}).json()

    assert (body["mode"], body["confidence"]) == ("llm", "high")
    assert body["citations"][0]["number"] == 1 and body["usage"]["total_tokens"] > 0
    assert token_pool_today().spent == body["usage"]["total_tokens"]
    assert len(with_model.calls) == 1


@pytest.mark.parametrize("question", ["今天中午吃什么好", "ArcRotateCamera 的 alpha 参数是什么"])
def test_chitchat_and_unknown_classes_never_call_the_model(client, kb, with_model, question):
    body = post(client, "/api/chat", {"question": question, "kb": "sdk"}).json()

    assert body["mode"] in ("chitchat", "empty") and body["citations"] == []
    assert with_model.calls == []


def test_excluding_all_evidence_says_why_and_does_not_call_the_model(client, kb, with_model):
    from rag.pipeline import get_engine

    every_chunk = [c.chunk_id for c in get_engine().reader("sdk", kb.active_version.name).chunks]

    body = post(client, "/api/chat", {"question": "Fog 的 near 默认值", "kb": "sdk", "exclude": every_chunk}).json()

    assert (body["mode"], body["reason"]) == ("empty", "all_evidence_excluded")
    assert with_model.calls == []


def test_a_failing_model_opens_the_breaker_and_answers_degraded_with_evidence(client, kb, with_model):
    with_model.replies.extend([("500", ""), ("500", "")])
    question = {"question": "PerspectiveCamera 的 far 默认值", "kb": "sdk"}

    post(client, "/api/chat", question)
    post(client, "/api/chat", question)
    third = post(client, "/api/chat", question).json()

    assert len(with_model.calls) == 2
    assert (third["degraded"], third["reason"]) == (True, "circuit_open") and third["citations"]
    from rag.services.generation import breaker_state

    state = breaker_state()
    assert state["state"] == "open" and [f["kind"] for f in state["last_failures"]] == ["http", "http"]
    assert RequestRecord.objects.filter(degraded=True).count() == 3


@POOL_DAY
def test_a_spent_pool_answers_429_without_calling_the_model(client, kb, with_model):
    pool = token_pool_today()
    pool.spent = pool.limit
    pool.save()

    response = post(client, "/api/chat", {"question": "PerspectiveCamera 的 far 默认值", "kb": "sdk"})

    assert (response.status_code, response.json()["code"]) == (429, "token_pool_exhausted")
    assert with_model.calls == []
    assert RequestRecord.objects.get().error_code == "token_pool_exhausted"


@POOL_DAY
def test_answers_in_flight_cannot_overspend_the_pool(settings, db):
    settings.RAG_WEB_TOKEN_POOL = 10_000
    settings.RAG_WEB_TOKEN_ESTIMATE = 4_000

    pool = WebTokenPool()
    with pool.reserve() as first, pool.reserve() as second:
        with pytest.raises(ServiceError) as raised:
            with pool.reserve():
                pass
        first.settle(1_000)
        second.settle(2_500)

    assert raised.value.code == "token_pool_exhausted"
    assert TokenPool.objects.get().spent == 3_500


@pytest.mark.time_machine(local_moment("2026-03-10 23:59:59"), tick=False)
def test_the_pool_refills_at_local_midnight(settings, db, time_machine):
    settings.RAG_WEB_TOKEN_POOL = 5_000
    settings.RAG_WEB_TOKEN_ESTIMATE = 4_000
    with WebTokenPool().reserve() as answer:
        answer.settle(4_000)
    with pytest.raises(ServiceError), WebTokenPool().reserve():  # 1,000 left today: not enough for an answer
        pass

    time_machine.shift(1)  # 00:00:00 local time
    with WebTokenPool().reserve() as answer:
        answer.settle(100)

    assert sorted((p.day.isoformat(), p.spent) for p in TokenPool.objects.all()) == [
        ("2026-03-10", 4_000), ("2026-03-11", 100)]


def test_thumbs_down_is_csrf_protected_and_recorded_once(kb):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    answer = post(browser, "/api/chat", {"question": "Fog 的 near 默认值", "kb": "sdk"}).json()

    refused = post(browser, "/api/feedback", {"request_id": answer["request_id"], "reason": "wrong"})
    browser.get("/")  # the page sets the CSRF cookie
    token = browser.cookies["csrftoken"].value
    first = browser.post("/api/feedback", {"request_id": answer["request_id"], "reason": "<b>wrong</b>"},
                         content_type="application/json", headers={"X-CSRFToken": token})
    second = browser.post("/api/feedback", {"request_id": answer["request_id"]}, content_type="application/json",
                          headers={"X-CSRFToken": token})

    assert refused.status_code == 403
    assert (first.status_code, second.status_code) == (201, 200)
    assert Feedback.objects.get().reason == "<b>wrong</b>"


def test_the_openapi_schema_documents_the_api(client):
    response = client.get("/api/schema", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    assert all(path.encode() in response.content for path in ("/api/search", "/api/chat", "/api/feedback"))


def test_the_chat_page_is_served_with_its_own_assets_and_a_csrf_cookie(client, kb):
    response = client.get("/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "/static/assistant/chat.js" in page and "/static/assistant/chat.css" in page
    assert "http://" not in page.replace("http://127.0.0.1", "") and "https://" not in page  # no CDN
    assert "csrftoken" in response.cookies

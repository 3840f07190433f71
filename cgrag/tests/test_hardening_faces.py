"""Issue 28 on the CG_RAG face: JSON bodies only, per-client limits for searches and generations apart (the
batch of /retrieve counts each query), a client's share of a daily token budget for the model calls, a key when
RAG_CGRAG_REQUIRE_KEY is on, and lone surrogates answered 400 by every route."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache

from cgrag.tests.conftest import finish_build
from conftest import local_moment

pytestmark = pytest.mark.django_db

NOON = pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)
QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"
DOCS = [{"law_name": "Fog", "article_number": ".far", "contents": "far is the distance where fog is full"}]
IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
BODIES = {
    "/cg-rag/retrieve-rerank": {"query": QUESTION, "scope": "sdk", "topk": 3},
    "/cg-rag/constrained-generate": {"query": QUESTION, "retrieval_docs": DOCS},
    "/cg-rag/rag": {"query": QUESTION, "scope": "sdk", "topk": 3},
    "/cg-rag/answer": {"query": QUESTION, "scope": "sdk", "topk": 3},
    "/cg-rag/rag/stream": {"query": QUESTION, "scope": "sdk", "topk": 3},
    "/cg-rag/warmup": {"scopes": ["sdk"]},
    "/cg-rag/vision/answer": {"images": [IMAGE], "query": QUESTION},
    "/cg-rag/vision/answer/stream": {"images": [IMAGE], "query": QUESTION},
    "/cg-rag/vision/observe": {"images": [IMAGE], "query": QUESTION},
    "/cg-rag/vision/agentic": {"images": [IMAGE], "query": QUESTION, "scope": "sdk"},
    "/cg-rag/vision/agentic/stream": {"images": [IMAGE], "query": QUESTION, "scope": "sdk"},
    "/retrieve": {"query": QUESTION, "scope": "sdk", "topk": 3},
}


@pytest.fixture(autouse=True)
def clean_counters():
    """Rate windows and token shares live in the cache: each test starts clean."""
    cache.clear()
    yield
    cache.clear()


def limit(settings, **values) -> None:
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, **values}


def post(client, path: str, body, **headers):
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def model(llm_server, engine_settings):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="qwen-test")
    llm_server.default_text = '{"indices": [1]}'
    return llm_server


# -- JSON bodies only ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(BODIES))
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x"])
def test_a_body_that_is_not_declared_json_is_refused_with_415_in_the_seeds_envelope(client, sdk_kb, model, path,
                                                                                      content_type):
    response = client.post(path, data=json.dumps(BODIES[path]), content_type=content_type,
                           HTTP_X_REQUEST_ID="req-cors")

    body = response.json()
    assert response.status_code == 415 and set(body) == {"request_id", "error"}
    assert (body["request_id"], body["error"]["code"]) == ("req-cors", "unsupported_media_type")
    assert model.calls == []


def test_json_with_a_charset_is_accepted(client, sdk_kb):
    response = client.post("/cg-rag/retrieve-rerank", data=json.dumps(BODIES["/cg-rag/retrieve-rerank"]),
                           content_type="application/json; charset=utf-8")

    assert response.status_code == 200


# -- per-client limits ----------------------------------------------------------------------------------------


@NOON
def test_searches_are_limited_per_client_with_429_and_retry_after(client, sdk_kb, settings):
    limit(settings, CGRAG_SEARCH_PER_MINUTE=2)

    first, second, third = (post(client, "/cg-rag/retrieve-rerank", BODIES["/cg-rag/retrieve-rerank"])
                            for _ in range(3))

    assert [first.status_code, second.status_code] == [200, 200]
    body = third.json()
    assert (third.status_code, body["error"]["code"], third["Retry-After"]) == (429, "rate_limited", "60")
    assert set(body) == {"request_id", "error"}


@NOON
def test_generations_are_limited_per_client_apart_from_searches(client, sdk_kb, model, settings):
    limit(settings, CGRAG_SEARCH_PER_MINUTE=10, CGRAG_GENERATE_PER_MINUTE=1)

    first = post(client, "/cg-rag/constrained-generate", BODIES["/cg-rag/constrained-generate"])
    second = post(client, "/cg-rag/rag", BODIES["/cg-rag/rag"])
    search = post(client, "/cg-rag/retrieve-rerank", BODIES["/cg-rag/retrieve-rerank"])

    assert first.status_code == 200 and search.status_code == 200
    assert (second.status_code, second.json()["error"]["code"]) == (429, "rate_limited")
    assert len(model.calls) == 1


@NOON
def test_a_generation_stream_over_the_limit_is_refused_before_any_frame(client, sdk_kb, settings):
    limit(settings, CGRAG_GENERATE_PER_MINUTE=1)

    post(client, "/cg-rag/rag/stream", BODIES["/cg-rag/rag/stream"]).close()
    second = post(client, "/cg-rag/rag/stream", BODIES["/cg-rag/rag/stream"])

    assert (second.status_code, second.json()["error"]["code"]) == (429, "rate_limited")


@NOON
def test_a_retrieve_batch_counts_each_of_its_queries(client, sdk_kb, settings):
    limit(settings, CGRAG_SEARCH_PER_MINUTE=3)

    batch = post(client, "/retrieve", {"queries": ["fog color", "camera fov", "scene add"], "topk": 2})
    single = post(client, "/retrieve", BODIES["/retrieve"])

    assert batch.status_code == 200 and len(batch.json()["result"]) == 3
    assert (single.status_code, single.json()["error"]["code"]) == (429, "rate_limited")


@NOON
def test_a_retrieve_batch_larger_than_the_limit_is_refused_whole(client, sdk_kb, settings):
    from rag.models import RequestRecord

    limit(settings, CGRAG_SEARCH_PER_MINUTE=3)

    response = post(client, "/retrieve", {"queries": ["a", "b", "c", "d"], "topk": 2})

    assert (response.status_code, response.json()["error"]["code"]) == (429, "rate_limited")
    assert not RequestRecord.objects.filter(outcome="ok").exists()


@NOON
@pytest.mark.parametrize("path, rate", [("/cg-rag/retrieve-rerank", "CGRAG_SEARCH_PER_MINUTE"),
                                        ("/retrieve", "CGRAG_SEARCH_PER_MINUTE"),
                                        ("/cg-rag/rag", "CGRAG_GENERATE_PER_MINUTE"),
                                        ("/cg-rag/answer", "CGRAG_GENERATE_PER_MINUTE")])
def test_replies_of_index_building_count_against_no_limit(client, building_kb, settings, path, rate):
    limit(settings, **{rate: 2})

    building = [post(client, path, BODIES[path]) for _ in range(3)]
    finish_build(building_kb)
    served = [post(client, path, BODIES[path]) for _ in range(2)]
    over = post(client, path, BODIES[path])

    assert [(r.status_code, r.json()["error"]["code"]) for r in building] == [(503, "index_building")] * 3
    assert [r.status_code for r in served] == [200, 200]
    assert (over.status_code, over.json()["error"]["code"]) == (429, "rate_limited")


@NOON
def test_a_retrieve_batch_answered_index_building_gives_back_each_of_its_queries(client, building_kb, settings):
    limit(settings, CGRAG_SEARCH_PER_MINUTE=3)
    batch = {"queries": ["fog color", "camera fov", "scene add"], "topk": 2}

    building = [post(client, "/retrieve", batch) for _ in range(2)]
    finish_build(building_kb)
    served = post(client, "/retrieve", batch)
    over = post(client, "/retrieve", BODIES["/retrieve"])

    assert [(r.status_code, r.json()["error"]["code"]) for r in building] == [(503, "index_building")] * 2
    assert served.status_code == 200 and len(served.json()["result"]) == 3
    assert (over.status_code, over.json()["error"]["code"]) == (429, "rate_limited")


# -- the token budget of the model calls ----------------------------------------------------------------------


@NOON
def test_a_generation_beyond_the_clients_token_share_is_refused_without_calling_the_model(client, sdk_kb, model,
                                                                                        settings):
    settings.RAG_CGRAG_TOKEN_POOL = 10_000
    settings.RAG_CGRAG_TOKEN_ESTIMATE = 3_000
    limit(settings, TOKEN_SHARE=0.1)  # 1,000 tokens a client: less than one answer's estimate

    response = post(client, "/cg-rag/constrained-generate", BODIES["/cg-rag/constrained-generate"])

    assert (response.status_code, response.json()["error"]["code"]) == (429, "client_token_share_exhausted")
    assert int(response["Retry-After"]) > 0 and model.calls == []


@NOON
def test_a_generation_settles_what_the_model_really_spent(client, sdk_kb, model, settings):
    settings.RAG_CGRAG_TOKEN_POOL = 100_000
    settings.RAG_CGRAG_TOKEN_ESTIMATE = 3_000
    limit(settings, TOKEN_SHARE=0.05)  # 5,000 tokens: one estimate at a time, many small answers

    statuses = [post(client, "/cg-rag/constrained-generate", BODIES["/cg-rag/constrained-generate"]).status_code
                for _ in range(4)]

    assert statuses == [200, 200, 200, 200] and len(model.calls) == 4


@NOON
def test_a_search_spends_no_token_share(client, sdk_kb, model, settings):
    settings.RAG_CGRAG_TOKEN_POOL = 10
    limit(settings, TOKEN_SHARE=0.1)

    response = post(client, "/cg-rag/retrieve-rerank", BODIES["/cg-rag/retrieve-rerank"])

    assert response.status_code == 200


# -- RAG_CGRAG_REQUIRE_KEY ------------------------------------------------------------------------------------


@pytest.fixture
def owner_key(db):
    """Issue a key with the given limits: (key, its secret)."""
    from apikeys.services import api_key_issue

    owner = get_user_model().objects.create_user("limited integrator", password="x")
    return lambda **limits: api_key_issue(owner=owner, name="cg client", **limits)


@pytest.fixture
def secret(db):
    from apikeys.services import api_key_issue

    owner = get_user_model().objects.create_user("integrator", password="x")
    _key, raw = api_key_issue(owner=owner, name="cg client")
    return raw


@pytest.mark.parametrize("path", ["/cg-rag/retrieve-rerank", "/cg-rag/constrained-generate", "/cg-rag/rag",
                                  "/cg-rag/rag/stream", "/cg-rag/vision/answer", "/retrieve"])
def test_with_a_key_required_a_call_without_one_is_401(client, sdk_kb, model, settings, path):
    settings.RAG_CGRAG_REQUIRE_KEY = True

    response = post(client, path, BODIES[path])

    body = response.json()
    assert (response.status_code, body["error"]["code"]) == (401, "missing_api_key")
    assert "WWW-Authenticate" in response and model.calls == []


def test_with_a_key_required_a_good_key_is_served_and_a_bad_one_refused(client, sdk_kb, model, settings, secret):
    settings.RAG_CGRAG_REQUIRE_KEY = True

    good = post(client, "/cg-rag/constrained-generate", BODIES["/cg-rag/constrained-generate"],
                HTTP_AUTHORIZATION=f"Bearer {secret}")
    bad = post(client, "/cg-rag/constrained-generate", BODIES["/cg-rag/constrained-generate"],
               HTTP_AUTHORIZATION="Bearer rk_not-a-key")
    health = client.get("/cg-rag/health")

    assert good.status_code == 200 and good.json()["ok"] is True
    assert (bad.status_code, bad.json()["error"]["code"]) == (401, "invalid_api_key")
    assert health.status_code == 200



@NOON
def test_with_a_key_required_replies_of_index_building_count_against_neither_its_rate_nor_its_quota(
        client, building_kb, settings, owner_key):
    from apikeys.models import ApiKeyUsage

    settings.RAG_CGRAG_REQUIRE_KEY = True
    key, raw = owner_key(daily_quota=2, rate_limit_per_minute=2)
    ask = lambda: post(client, "/cg-rag/rag", BODIES["/cg-rag/rag"], HTTP_AUTHORIZATION=f"Bearer {raw}")  # noqa: E731

    building = [ask() for _ in range(3)]
    finish_build(building_kb)
    served = [ask() for _ in range(2)]
    over = ask()

    assert [(r.status_code, r.json()["error"]["code"]) for r in building] == [(503, "index_building")] * 3
    assert [r.status_code for r in served] == [200, 200]
    assert (over.status_code, over.json()["error"]["code"]) == (429, "rate_limited")
    assert sum(ApiKeyUsage.objects.filter(key=key).values_list("calls", flat=True)) == 2
    assert sum(ApiKeyUsage.objects.filter(key=key).values_list("failures", flat=True)) == 0

# -- lone surrogates ------------------------------------------------------------------------------------------


LONE = '"index \\ud800"'


@pytest.mark.parametrize("path, raw", [
    ("/retrieve", '{"query": %s}' % LONE),
    ("/retrieve", '{"query": "fog", "scope": %s}' % LONE),
    ("/retrieve", '{"queries": [%s]}' % LONE),
    ("/retrieve", '{%s: 1, "query": "fog"}' % LONE),
    ("/cg-rag/retrieve-rerank", '{"query": %s}' % LONE),
    ("/cg-rag/constrained-generate", '{"query": "fog", "retrieval_docs": [{"contents": %s}]}' % LONE),
    ("/cg-rag/rag", '{"query": %s}' % LONE),
    ("/cg-rag/answer", '{"query": %s}' % LONE),
    ("/cg-rag/rag/stream", '{"query": %s}' % LONE),
    ("/cg-rag/warmup", '{"scopes": [%s]}' % LONE),
    ("/cg-rag/vision/answer", '{"images": ["%s"], "query": %s}' % (IMAGE, LONE)),
    ("/cg-rag/vision/agentic", '{"images": ["%s"], "scope": %s}' % (IMAGE, LONE)),
])
def test_a_lone_surrogate_is_a_400_invalid_request_on_every_route(client, sdk_kb, path, raw):
    response = client.post(path, data=raw.encode(), content_type="application/json")

    body = response.json()
    assert (response.status_code, body["error"]["code"]) == (400, "invalid_request"), body

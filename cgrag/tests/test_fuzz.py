"""Bad input on the CG_RAG face (hypothesis, in process): any body on any route gets the seed's answer — a success
or its envelope `{request_id, error: {code, message, details}}` with a stable code — never a 500, and changes
nothing stored. The face serves no OpenAPI document (seed 004 has none), so it is fuzzed here from its fields.
The streaming routes share their parsers with the routes fuzzed here. Bounded and derandomized."""

from __future__ import annotations

import json
import re

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings, strategies as st

from rag.models import Document, IndexVersion, KnowledgeBase

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CODE = re.compile(r"[a-z][a-z0-9_.]*")
QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"
IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62) | st.floats()
           | st.text(max_size=12) | st.sampled_from(["", " ", "\x00", "\u200b", "\ud800", "1", "true", "sdk", "full",
                                                     "../sdk", "x" * 300, QUESTION, IMAGE, "data:image/png;base64,!"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=6)


def anything(*likely):
    return st.sampled_from(likely) | JSON


DOC = st.fixed_dictionaries({}, optional={name: anything("Camera", "", "x" * 20_001) for name in (
    "law_name", "article_number", "contents", "chunk_id", "source")})
QUERY = anything(QUESTION, "", "  ", "x" * 2001)
SCOPE = anything("sdk", "full", "unknown", "")
TOPK = anything(1, 5, 0, 201, 2**70, "5", True)
MAX_ITEMS = anything(1, 20, 0, 21, "1")
FLAG = anything(True, False, "true", 1)
ROUTES = {
    "/cg-rag/retrieve-rerank": ({"query": QUESTION, "scope": "sdk", "topk": 5},
                                {"query": QUERY, "scope": SCOPE, "topk": TOPK}),
    "/cg-rag/constrained-generate": ({"query": QUESTION, "retrieval_docs": [{"contents": "fov = 50"}], "max_items": 1},
                                     {"query": QUERY, "retrieval_docs": st.lists(DOC, max_size=3) | JSON,
                                      "max_items": MAX_ITEMS, "include_debug": FLAG,
                                      "generation_enable_thinking": FLAG}),
    "/cg-rag/rag": ({"query": QUESTION, "scope": "sdk", "topk": 3},
                    {"query": QUERY, "scope": SCOPE, "topk": TOPK, "max_items": MAX_ITEMS, "include_debug": FLAG,
                     "generation_enable_thinking": FLAG}),
    "/cg-rag/warmup": ({"scopes": ["sdk"]}, {"scopes": st.lists(SCOPE, max_size=3) | JSON}),
    "/retrieve": ({"query": QUESTION, "topk": 3},
                  {"query": QUERY, "scope": SCOPE, "topk": TOPK, "queries": st.lists(QUERY, max_size=3) | JSON,
                   "return_scores": FLAG}),
    "/cg-rag/vision/answer": ({"images": [IMAGE], "query": QUESTION},
                              {"images": st.lists(anything(IMAGE, "", "data:,"), max_size=3) | JSON, "query": QUERY,
                               "include_debug": FLAG}),
    "/cg-rag/vision/observe": ({"images": [IMAGE]}, {"images": st.lists(anything(IMAGE), max_size=2) | JSON}),
    "/cg-rag/vision/agentic": ({"images": [IMAGE], "query": QUESTION, "scope": "sdk"},
                               {"images": st.lists(anything(IMAGE), max_size=2) | JSON, "query": QUERY,
                                "scope": SCOPE}),
}


@st.composite
def requests(draw) -> tuple[str, bytes | str]:
    """A route and a body: its valid body with up to three fields dropped or replaced and maybe an unknown one
    added; or any JSON, bad JSON, or no body."""
    path = draw(st.sampled_from(sorted(ROUTES)))
    valid, fields = ROUTES[path]
    if draw(st.integers(0, 3)) == 0:
        return path, draw(JSON.map(json.dumps) | st.sampled_from(["", "{", "[]", "null", '{"a": NaN}', "[" * 5000])
                          | st.binary(max_size=50))
    body = dict(valid)
    for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
        if draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = draw(fields[name])
    if draw(st.booleans()):
        body[draw(st.text(max_size=8))] = draw(JSON)
    return path, json.dumps(body)


def stored_rows() -> tuple:
    return (list(KnowledgeBase.objects.values_list("slug", "active_version_id", "updated_at")),
            list(Document.objects.values_list("path", "content_hash", "title")),
            list(IndexVersion.objects.values_list("name", "status")))


@FUZZ
@given(request=requests())
def test_any_body_on_any_cgrag_route_gets_the_seed_envelope_never_a_500(client, sdk_kb, request):
    path, body = request
    stored = stored_rows()

    with transaction.atomic():  # each example's request records are rolled back
        response = client.generic("POST", path, body, content_type="application/json")
        transaction.set_rollback(True)

    assert response.status_code != 500, (path, response.content[:2000])
    payload = response.json()
    if response.status_code != 200:
        assert CODE.fullmatch(payload["error"]["code"]) and set(payload) == {"request_id", "error"}, payload
    assert stored_rows() == stored


@pytest.mark.parametrize("path", sorted(ROUTES))
@pytest.mark.parametrize("body", ["[" * 5000, b'{"query": "\xff"}'])
def test_json_nested_too_deeply_or_not_utf8_is_invalid_request_on_every_route(client, sdk_kb, path, body):
    response = client.generic("POST", path, body, content_type="application/json")

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_request")


@pytest.mark.parametrize("body", ['{"query": "camera fov", "topk": NaN}', '{"queries": ["camera fov"], "topk": Infinity}'])
def test_nan_and_infinity_are_invalid_request_on_the_legacy_retrieve(client, sdk_kb, body):
    response = client.generic("POST", "/retrieve", body, content_type="application/json")

    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_request")

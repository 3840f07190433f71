"""Bad input on the three retrieval faces (hypothesis, in process): any body, of any JSON or none, gets the
face's own answer — a success or its error envelope with a stable code — never a 500, and changes nothing stored.

Seed 002's face is also fuzzed from its OpenAPI description by schemathesis (ragsite/tests/test_schema.py);
RAGFlow's and Dify's faces serve no OpenAPI document of their own (they follow those products' APIs), so they are
fuzzed here from their fields. Bounded and derandomized: CI sends the same bodies every run."""

from __future__ import annotations

import json
import re

import pytest
from django.core.cache import cache
from django.db import transaction
from hypothesis import HealthCheck, given, settings, strategies as st

from apikeys.models import ApiKey
from rag.models import Document, IndexVersion, KnowledgeBase, RetrievalApp

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=60, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CODE = re.compile(r"[a-z][a-z0-9_.]*")
QUESTION = "How do I add a mesh to a scene?"

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2**62) | st.floats()
           | st.text(max_size=12) | st.sampled_from(["", " ", "\x00", "\u200b", "\ud800", "1", "-1", "alpha", "and",
                                                     "or", "is", "contains", "=", ">", "empty", QUESTION]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=6)


def anything(*likely):
    """A value for a field: one of the likely ones (valid or nearly), or any JSON."""
    return st.sampled_from(likely) | JSON if likely else JSON


def conditions(logic_key: str):
    condition = st.fixed_dictionaries({}, optional={
        "name": anything("level", "product", "title", "path", "doc_id"),
        "comparison_operator": anything("is", "is not", "contains", "not contains", "start with", "empty", "=", "≥",
                                        "in", "before"),
        "value": anything("beginner", "engine", 1, "2026-01-01", ["a", "b"])})
    return st.fixed_dictionaries({}, optional={logic_key: anything("and", "or", "AND"),
                                               "conditions": st.lists(condition, max_size=3) | JSON}) | JSON


def bodies(valid: dict, fields: dict):
    """JSON bodies: a valid one with up to three fields dropped or replaced (by nearly valid values or any JSON)
    and maybe an unknown field added; and non-objects, bad JSON and no body."""

    @st.composite
    def mutated(draw) -> str:
        body = dict(valid)
        for name in draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True)):
            if draw(st.booleans()):
                body.pop(name, None)
            else:
                body[name] = draw(fields[name])
        if draw(st.booleans()):
            body[draw(st.text(max_size=8))] = draw(JSON)
        return json.dumps(body)

    return (mutated() | mutated() | mutated() | JSON.map(json.dumps)
            | st.sampled_from(["", "{", "[]", "null", '{"question": ', "\x00", '{"a": NaN}', "[" * 5000])
            | st.binary(max_size=50))


def seed_bodies(kb_ids, app_id):
    setting = st.fixed_dictionaries({}, optional={name: anything(0, 0.5, 1, 2, 30, True) for name in (
        "similarity_threshold", "dense_weight", "top_k", "top_n", "enable_rerank", "enable_llm_rerank",
        "rank_score_threshold", "enable_agent_enhance_search", "enable_kb_priority")} | {
        "label_value_ids": anything([1], [0], [2**70]), "kb_priority": anything({"p0": kb_ids[:1]}, {"p9": []}),
        "extra": JSON}) | JSON
    valid = {"question": QUESTION, "dialog_id": app_id, "kb_ids": kb_ids, "rag_setting": {}}
    return bodies(valid, {"question": anything(QUESTION, ""), "dialog_id": anything(app_id, 0, "1", 2**64),
                   "app_id": anything(app_id, -1, 2**70), "kb_ids": anything(kb_ids, kb_ids[:1], ["alpha"], [2**70]),
                   "doc_ids": anything([1], [], [2**70]), "graph_ids": JSON, "ontology_ids": JSON,
                   "rag_setting": setting, "metadata": st.fixed_dictionaries({}, optional={
                       "rag_setting": setting, "metadata_condition": conditions("logic")}) | JSON})


def ragflow_bodies(kb_ids):
    valid = {"question": QUESTION, "dataset_ids": kb_ids}
    return bodies(valid, {"question": anything(QUESTION, ""), "dataset_ids": anything(kb_ids, ["alpha"], [], [2**70]),
                   "document_ids": anything([1], ["1"], [2**70]), "page": anything(1, 2, 0, 10**9),
                   "page_size": anything(1, 30, 2000), "similarity_threshold": anything(0, 0.2, 2),
                   "vector_similarity_weight": anything(0, 0.3, 1, -1), "top_k": anything(1, 1024, 5000),
                   "rerank_id": anything("", "bge"), "keyword": anything(True, False, "yes"),
                   "highlight": anything(True, False), "metadata_condition": conditions("logic")})


def dify_bodies(kb_ids):
    valid = {"knowledge_id": str(kb_ids[0]), "query": QUESTION, "retrieval_setting": {"top_k": 4, "score_threshold": 0}}
    return bodies(valid, {"knowledge_id": anything(kb_ids[0], str(kb_ids[0]), "alpha", 0, 2**70, ""),
                   "query": anything(QUESTION, ""), "retrieval_setting": st.fixed_dictionaries({}, optional={
                       "top_k": anything(1, 4, 0, 10**6), "score_threshold": anything(0, 0.5, 1.5)}) | JSON,
                   "metadata_condition": conditions("logical_operator") | st.just({"conditions": None})})


def stored_rows() -> tuple:
    """What a request must not change: the knowledge bases, their documents and versions, the apps and keys."""
    return (list(KnowledgeBase.objects.values_list("slug", "active_version_id", "updated_at")),
            list(Document.objects.values_list("path", "content_hash", "title")),
            list(IndexVersion.objects.values_list("name", "status")),
            list(RetrievalApp.objects.values_list("name", "published")),
            list(ApiKey.objects.values_list("prefix", "app_id", "revoked_at")))


def post(client, path: str, body, headers: dict):
    """One request in a transaction rolled back after it, with the cache cleared: no example sees another's
    records, usage counts or failed attempts."""
    cache.clear()
    with transaction.atomic():
        response = client.generic("POST", path, body, content_type="application/json", **headers)
        transaction.set_rollback(True)
    return response


def error_code(response, face: str) -> str | None:
    body = response.json()
    if face == "seed":
        return None if body["code"] == 0 else body["error"]
    if face == "ragflow":
        return None if body["code"] == 0 else body["error"]
    return None if "records" in body else body["error"]


def check(response, face: str) -> None:
    assert response.status_code != 500, response.content[:2000]
    code = error_code(response, face)
    if response.status_code == 200 and code is None:
        return
    assert isinstance(code, str) and CODE.fullmatch(code), response.content[:500]
    if face == "seed":
        assert response.json()["code"] != 1500


@FUZZ
@given(data=st.data())
def test_any_body_on_the_open_retrieval_api_gets_a_stable_code_never_a_500(client, two_kbs, data):
    kb_ids = [two_kbs.alpha.pk, two_kbs.beta.pk]
    stored = stored_rows()

    body = data.draw(seed_bodies(kb_ids, two_kbs.app.pk), label="body")
    response = post(client, "/api/v1/retrieval", body, two_kbs.headers)

    check(response, "seed")
    assert stored_rows() == stored


@FUZZ
@given(data=st.data())
def test_any_body_on_the_ragflow_api_gets_a_stable_code_never_a_500(client, two_kbs, data):
    stored = stored_rows()

    body = data.draw(ragflow_bodies([two_kbs.alpha.pk, two_kbs.beta.pk]), label="body")
    response = post(client, "/ragflow/api/v1/retrieval", body, two_kbs.headers)

    check(response, "ragflow")
    assert stored_rows() == stored


@FUZZ
@given(data=st.data())
def test_any_body_on_the_dify_api_gets_a_stable_code_never_a_500(client, two_kbs, data):
    stored = stored_rows()

    body = data.draw(dify_bodies([two_kbs.alpha.pk, two_kbs.beta.pk]), label="body")
    response = post(client, "/dify/retrieval", body, two_kbs.headers)

    check(response, "dify")
    assert stored_rows() == stored


@pytest.mark.parametrize("path", ["/api/v1/retrieval", "/ragflow/api/v1/retrieval", "/dify/retrieval"])
@pytest.mark.parametrize("body", ['{"question": "mesh", "query": "mesh", "top_k": NaN}', '{"page": Infinity}',
                                  "[" * 5000, b'{"question": "\xff"}'])
def test_json_that_is_not_json_is_invalid_request_on_every_face(client, two_kbs, path, body):
    response = post(client, path, body, two_kbs.headers)

    assert response.status_code in (200, 400)  # RAGFlow answers every failure but a key's with HTTP 200
    assert error_code(response, path.split("/")[1].replace("api", "seed")) == "invalid_request"

"""Seed 002's open retrieval API, `POST /api/v1/retrieval`, through the HTTP interface: the reply's shape, the
rag_setting controls, document filters, the override layers, every failure's numeric code and HTTP status, the
rerank and enhanced-search options, and the record and key usage each call leaves."""

from __future__ import annotations

import html
import json
import re
import shutil
from urllib.parse import urlencode

import pytest

from apikeys.models import ApiKey, ApiKeyUsage
from conftest import local_moment
from rag.models import Document, DocumentLabel, IndexVersion, KnowledgeBase, LabelValue, RequestRecord, RetrievalApp
from rag.tests.conftest import make_built_kb
from retrieval.tests.conftest import FIXTURES

URL = "/api/v1/retrieval"
MESH_QUESTION = "How do I add a mesh to the scene?"
LIGHT_QUESTION = "灯光强度"
EVERYTHING = {"similarity_threshold": 0.0, "top_n": 100}  # every candidate, in one window
CHUNK_FIELDS = {"chunk_id", "content_with_weight", "doc_id", "docnm_kwd", "kb_ids", "important_kwd", "image_id",
                "similarity", "vector_similarity", "term_similarity", "content_ltks", "highlight", "question", "extra",
                "source", "character_count", "url", "title"}
DOC_AGG_FIELDS = {"doc_id", "doc_name", "count", "avg_score", "semantic_score", "labels", "create_time"}
DROP = object()  # a body field left out
NOT_CONFIGURED = 409  # an option whose model this server lacks: 1401 / 1402, a conflict with its configuration


@pytest.fixture
def no_models(engine_settings):
    """Neither a rerank API nor a generation model, whatever the environment says."""
    engine_settings(RERANK_BASE_URL="", GENERATION_BASE_URL="", LLM_RERANK=False, QUERY_REWRITE=False)


# -- helpers ---------------------------------------------------------------------------------------------


def body_of(two_kbs, **fields) -> dict:
    """An open call over both knowledge bases for the mesh question, with `fields` changed (DROP leaves one out)."""
    body = {"app_id": two_kbs.app.pk, "question": MESH_QUESTION, "kb_ids": [two_kbs.alpha.pk, two_kbs.beta.pk],
            "rag_setting": {}}
    for name, value in fields.items():
        if value is DROP:
            body.pop(name, None)
        else:
            body[name] = value
    return body


def retrieve(client, two_kbs, body, *, headers=None):
    return client.post(URL, json.dumps(body), content_type="application/json",
                       **(two_kbs.headers if headers is None else headers))


def data_of(response) -> dict:
    assert response.status_code == 200, response.content
    payload = response.json()
    assert payload["code"] == 0, payload
    return payload["data"]


def failure_of(response) -> tuple[int, int, str]:
    payload = response.json()
    assert payload["data"] is None and payload["msg"] == payload["message"] and payload["message"]
    return response.status_code, payload["code"], payload["error"]


def pages(data) -> set[tuple[str, str]]:
    """The (knowledge base, page) pairs of the returned chunks."""
    return {(chunk["source"], chunk["docnm_kwd"]) for chunk in data["chunks"]}


def ids(data) -> list[str]:
    return [chunk["chunk_id"] for chunk in data["chunks"]]


def label_value(label: str, value: str) -> int:
    return LabelValue.objects.get(label__name=label, value=value).pk


def stored_state() -> dict:
    """What a failed call must leave as it was."""
    return {
        "kbs": list(KnowledgeBase.objects.order_by("pk").values_list("pk", "slug", "active_version_id", "base_url")),
        "versions": list(IndexVersion.objects.order_by("pk").values_list("pk", "status")),
        "documents": list(Document.objects.order_by("pk").values_list("pk", "kb_id", "path", "title", "metadata")),
        "labels": list(DocumentLabel.objects.order_by("pk").values_list("document_id", "value_id")),
        "label_values": LabelValue.objects.count(),
        "apps": list(RetrievalApp.objects.order_by("pk").values_list("pk", "published", "rag_setting")),
        "app_kbs": sorted(RetrievalApp.knowledge_bases.through.objects.values_list("retrievalapp_id",
                                                                                   "knowledgebase_id")),
        "keys": list(ApiKey.objects.order_by("pk").values_list("pk", "app_id", "revoked_at", "daily_quota")),
    }


def usage_of(key) -> tuple[int, int]:
    """The key's (calls, failures) on this face, over every day (a call near midnight still counts once)."""
    rows = ApiKeyUsage.objects.filter(key=key, tool="retrieval_api")
    return sum(r.calls for r in rows), sum(r.failures for r in rows)


def make_gamma(tmp_path):
    """A third knowledge base, in no app."""
    folder = tmp_path / "gamma"
    shutil.copytree(FIXTURES / "alpha", folder)
    return make_built_kb(folder, slug="gamma")


# -- 1. the reply ------------------------------------------------------------------------------------------


def test_a_successful_call_answers_code_0_with_the_seed_data(client, two_kbs):
    response = retrieve(client, two_kbs, body_of(two_kbs))

    payload = response.json()
    assert response.status_code == 200
    assert (payload["code"], payload["msg"], payload["message"]) == (0, "success", "success")
    assert payload["request_id"]
    data = payload["data"]
    assert set(data) >= {"total", "chunks", "doc_aggs", "summary"}
    assert data["summary"] == ""
    assert data["total"] == len(data["chunks"]) > 0
    assert {c["title"] for c in data["chunks"][:2]} == {
        "Mesh > Constructor > Mesh ( geometry : Geometry, material : Material )",
        "Scene > Methods > .add ( object : Object3D ) : Scene"}
    assert {c["source"] for c in data["chunks"][:2]} == {"alpha"}
    scores = [c["similarity"] for c in data["chunks"]]
    assert scores == sorted(scores, reverse=True)


def test_every_chunk_field_has_a_real_value(client, two_kbs):
    setting = {"dense_weight": 0.3, "extra": {"tenant": "t-1", "trace": [1, 2]}, **EVERYTHING}
    body = body_of(two_kbs, rag_setting=setting)

    data = data_of(retrieve(client, two_kbs, body))

    assert data["chunks"]
    kb_by_slug = {"alpha": two_kbs.alpha, "beta": two_kbs.beta}
    for chunk in data["chunks"]:
        assert set(chunk) >= CHUNK_FIELDS
        kb = kb_by_slug[chunk["source"]]
        document = Document.objects.get(pk=int(chunk["doc_id"]))
        assert (document.kb_id, document.path) == (kb.pk, chunk["docnm_kwd"])
        assert chunk["kb_ids"] == [str(kb.pk)]
        assert chunk["chunk_id"] and isinstance(chunk["chunk_id"], str)
        assert chunk["content_with_weight"].strip()
        assert chunk["character_count"] == len(chunk["content_with_weight"])
        assert isinstance(chunk["important_kwd"], list) and chunk["important_kwd"]
        assert all(isinstance(word, str) and word for word in chunk["important_kwd"])
        assert chunk["image_id"] == ""
        for name in ("similarity", "vector_similarity", "term_similarity"):
            assert isinstance(chunk[name], float) and 0.0 <= chunk[name] <= 1.0
        assert chunk["similarity"] == pytest.approx(
            0.3 * chunk["vector_similarity"] + 0.7 * chunk["term_similarity"], abs=1e-5)
        assert isinstance(chunk["content_ltks"], str) and chunk["content_ltks"].strip()
        assert chunk["question"] == MESH_QUESTION
        assert chunk["extra"] == {"tenant": "t-1", "trace": [1, 2]}
        assert chunk["title"].strip()
        assert "rank_score" not in chunk


def test_the_highlight_wraps_matched_words_in_em_and_escapes_the_rest(client, two_kbs):
    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))
    chinese = data_of(retrieve(client, two_kbs, body_of(two_kbs, question=LIGHT_QUESTION)))

    for chunk in data["chunks"] + chinese["chunks"]:
        assert re.sub(r"</?em>", "", chunk["highlight"]) == html.escape(chunk["content_with_weight"])
    constructor = next(c for c in data["chunks"] if c["title"].startswith("Mesh > Constructor"))
    assert "<em>Mesh</em>" in constructor["highlight"] and "<em>mesh</em>" in constructor["highlight"]
    assert "<em>geometry</em>" not in constructor["highlight"]
    timer = next(c for c in data["chunks"] if c["docnm_kwd"] == "Timer.md")
    assert "<em>" not in timer["highlight"]
    first = chinese["chunks"][0]
    assert (first["source"], first["docnm_kwd"], first["title"]) == ("beta", "Light.md",
                                                                      "灯光（Light） > 属性 > .intensity : Float")
    assert "<em>灯光</em>" in first["highlight"] and "<em>强度</em>" in first["highlight"]


def test_the_url_is_the_front_matter_url_else_the_base_url_and_path(client, two_kbs):
    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))

    url_of = {(c["source"], c["docnm_kwd"]): c["url"] for c in data["chunks"]}
    assert url_of[("alpha", "Scene.md")] == "https://docs.example.com/engine/Scene"
    assert url_of[("alpha", "Mesh.md")] == "https://docs.example.com/engine/Mesh.md"
    assert url_of[("alpha", "Timer.md")] == "https://docs.example.com/engine/Timer.md"
    assert url_of[("beta", "Light.md")] == ""  # beta has neither a base URL nor front matter urls


def test_doc_aggs_count_every_passing_chunk_of_each_document_and_carry_its_labels(client, two_kbs):
    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))

    aggs = data["doc_aggs"]
    assert aggs and sum(a["count"] for a in aggs) == data["total"]
    for agg in aggs:
        assert set(agg) >= DOC_AGG_FIELDS
        document = Document.objects.get(pk=int(agg["doc_id"]))
        assert agg["doc_name"] == document.path
        assert agg["create_time"] == document.first_seen_at.isoformat()
        members = [c for c in data["chunks"] if c["doc_id"] == agg["doc_id"]]
        assert agg["count"] == len(members)
        assert agg["avg_score"] == pytest.approx(sum(c["similarity"] for c in members) / len(members), abs=1e-5)
        assert agg["semantic_score"] == pytest.approx(
            sum(c["vector_similarity"] for c in members) / len(members), abs=1e-5)
        assert 0.0 <= agg["avg_score"] <= 1.0 and 0.0 <= agg["semantic_score"] <= 1.0
    counts = [a["count"] for a in aggs]
    assert counts == sorted(counts, reverse=True)
    labels_of = {a["doc_name"]: {(row["label"], row["value"]) for row in a["labels"]} for a in aggs}
    assert labels_of["Scene.md"] == {("level", "beginner"), ("product", "engine"), ("product", "editor")}
    assert labels_of["Light.md"] == {("level", "beginner"), ("product", "viewer")}
    assert labels_of["Timer.md"] == set()
    scene = next(a for a in aggs if a["doc_name"] == "Scene.md")
    for row in scene["labels"]:
        value = LabelValue.objects.get(pk=row["id"])
        assert (value.label_id, value.label.name, value.value) == (row["label_id"], row["label"], row["value"])


# -- 2. the rag_setting controls --------------------------------------------------------------------------


def test_a_similarity_threshold_keeps_only_chunks_at_or_above_it(client, two_kbs):
    everything = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))
    keywords = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"dense_weight": 0.0, **EVERYTHING})))

    high = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "similarity_threshold": 0.6})))
    default = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"dense_weight": 0.0, "top_n": 100})))

    assert 0 < high["total"] < everything["total"]
    assert all(c["similarity"] >= 0.6 for c in high["chunks"])
    assert high["total"] == len(high["chunks"]) == sum(c["similarity"] >= 0.6 for c in everything["chunks"])
    assert sum(a["count"] for a in high["doc_aggs"]) == high["total"]
    # the default threshold is 0.2
    assert 0 < default["total"] == sum(c["similarity"] >= 0.2 for c in keywords["chunks"]) < keywords["total"]


def test_a_dense_weight_of_0_or_1_ranks_by_one_side_only(client, two_kbs):
    keywords = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"dense_weight": 0.0, **EVERYTHING})))

    vectors = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"dense_weight": 1.0, **EVERYTHING})))

    for data, side in ((keywords, "term_similarity"), (vectors, "vector_similarity")):
        assert data["chunks"]
        assert all(c["similarity"] == pytest.approx(c[side], abs=1e-6) for c in data["chunks"])
        assert [c[side] for c in data["chunks"]] == sorted((c[side] for c in data["chunks"]), reverse=True)
    assert ids(keywords)[:5] != ids(vectors)[:5]  # the weight changes the order
    assert set(ids(keywords)) == set(ids(vectors))


def test_top_k_limits_the_candidates(client, two_kbs):
    everything = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))

    few = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "top_k": 3})))

    assert few["total"] == len(few["chunks"]) == 3
    assert ids(few) == ids(everything)[:3]
    assert sum(a["count"] for a in few["doc_aggs"]) == 3


def test_top_n_limits_the_window_while_total_counts_every_passing_chunk(client, two_kbs):
    everything = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))

    window = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "top_n": 2})))

    assert len(window["chunks"]) == 2
    assert window["total"] == everything["total"] > 2
    assert ids(window) == ids(everything)[:2]
    assert sum(a["count"] for a in window["doc_aggs"]) == window["total"]


@pytest.mark.parametrize("question, first, second", [(MESH_QUESTION, "beta", "alpha"),
                                                      (LIGHT_QUESTION, "alpha", "beta")])
def test_kb_priority_puts_p0s_chunks_before_p1s(client, two_kbs, question, first, second):
    kb = {"alpha": two_kbs.alpha, "beta": two_kbs.beta}
    plain = data_of(retrieve(client, two_kbs, body_of(two_kbs, question=question, rag_setting=EVERYTHING)))
    assert plain["chunks"][0]["source"] == second  # without the priority the other knowledge base leads
    setting = {**EVERYTHING, "enable_kb_priority": True,
               "kb_priority": {"p0": [kb[first].pk], "p1": [kb[second].pk]}}

    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, question=question, rag_setting=setting)))

    sources = [c["source"] for c in data["chunks"]]
    cut = sources.count(first)
    assert 0 < cut < len(sources)
    assert sources == [first] * cut + [second] * (len(sources) - cut)
    for group in (data["chunks"][:cut], data["chunks"][cut:]):
        scores = [c["similarity"] for c in group]
        assert scores == sorted(scores, reverse=True)
    assert data["total"] == plain["total"]


def test_kb_priority_is_ignored_unless_enabled_and_fills_the_window_from_p0_first(client, two_kbs):
    plain = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))
    priority = {"p0": ["beta"], "p1": ["alpha"]}

    disabled = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "kb_priority": priority})))
    window = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={
        "similarity_threshold": 0.0, "top_n": 3, "enable_kb_priority": True, "kb_priority": priority})))

    assert ids(disabled) == ids(plain)
    assert [c["source"] for c in window["chunks"]] == ["beta"] * 3
    assert window["total"] == plain["total"]


def test_kb_ids_restrict_the_search_to_the_named_knowledge_bases(client, two_kbs):
    cases = [([two_kbs.beta.pk], {"beta"}), ([two_kbs.alpha.pk], {"alpha"}), (["beta"], {"beta"}),
             ([str(two_kbs.alpha.pk)], {"alpha"}), ([two_kbs.alpha.pk, "beta"], {"alpha", "beta"})]

    found = [pages(data_of(retrieve(client, two_kbs, body_of(two_kbs, kb_ids=kb_ids, rag_setting=EVERYTHING))))
             for kb_ids, _ in cases]

    for (_, sources), got in zip(cases, found, strict=True):
        assert got == {(d.kb.slug, d.path) for d in Document.objects.filter(kb__slug__in=sources)}


# -- 3. document filters -----------------------------------------------------------------------------------


def pages_with_labels(client, two_kbs, values) -> set[tuple[str, str]]:
    setting = {**EVERYTHING, "label_value_ids": [label_value(label, value) for label, value in values]}
    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=setting)))
    assert data["total"] == len(data["chunks"])
    return pages(data)


def test_label_value_ids_of_one_label_keep_documents_with_any_of_them(client, two_kbs):
    beginner = pages_with_labels(client, two_kbs, [("level", "beginner")])
    either = pages_with_labels(client, two_kbs, [("level", "beginner"), ("level", "advanced")])
    editor = pages_with_labels(client, two_kbs, [("product", "editor")])

    assert beginner == {("alpha", "Mesh.md"), ("alpha", "Scene.md"), ("beta", "Light.md")}
    assert either == {("alpha", "Mesh.md"), ("alpha", "Scene.md"), ("alpha", "Shader.md"), ("beta", "Camera.md"),
                      ("beta", "Light.md")}
    assert editor == {("alpha", "Scene.md")}


def test_label_value_ids_of_several_labels_keep_documents_with_each_label(client, two_kbs):
    beginner_viewer = pages_with_labels(client, two_kbs, [("level", "beginner"), ("product", "viewer")])
    advanced_any_product = pages_with_labels(client, two_kbs, [("level", "advanced"), ("product", "engine"),
                                                               ("product", "viewer")])
    advanced_editor = pages_with_labels(client, two_kbs, [("level", "advanced"), ("product", "editor")])

    assert beginner_viewer == {("beta", "Light.md")}
    assert advanced_any_product == {("alpha", "Shader.md"), ("beta", "Camera.md")}
    assert advanced_editor == set()


def test_label_value_ids_in_the_app_setting_apply_and_combine_with_conditions(client, two_kbs):
    two_kbs.app.rag_setting = {"label_value_ids": [label_value("product", "viewer")]}
    two_kbs.app.save(update_fields=["rag_setting"])
    metadata = {"metadata_condition": {"logic": "and", "conditions": [condition("author", "is", "dave")]}}

    from_app = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING)))
    combined = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING, metadata=metadata)))

    assert pages(from_app) == {("beta", "Camera.md"), ("beta", "Light.md")}
    assert pages(combined) == {("beta", "Light.md")}


def test_an_unknown_label_value_id_is_404_with_code_1303(client, two_kbs):
    unknown = max(LabelValue.objects.values_list("pk", flat=True)) + 1000
    setting = {"label_value_ids": [label_value("level", "beginner"), unknown]}

    response = retrieve(client, two_kbs, body_of(two_kbs, rag_setting=setting))

    assert failure_of(response) == (404, 1303, "label_value_not_found")


def test_doc_ids_restrict_the_search_to_those_documents(client, two_kbs):
    mesh = Document.objects.get(kb=two_kbs.alpha, path="Mesh.md")
    light = Document.objects.get(kb=two_kbs.beta, path="Light.md")

    body = body_of(two_kbs, doc_ids=[mesh.pk, str(light.pk)], rag_setting=EVERYTHING)

    data = data_of(retrieve(client, two_kbs, body))

    assert pages(data) == {("alpha", "Mesh.md"), ("beta", "Light.md")}
    assert {c["doc_id"] for c in data["chunks"]} == {str(mesh.pk), str(light.pk)}
    assert data["total"] == mesh.chunk_count + light.chunk_count


def condition(name, operator, value=None) -> dict:
    return {"name": name, "comparison_operator": operator, "value": value}


def pages_where(client, two_kbs, metadata_condition) -> set[tuple[str, str]]:
    body = body_of(two_kbs, rag_setting=EVERYTHING, metadata={"metadata_condition": metadata_condition})
    data = data_of(retrieve(client, two_kbs, body))
    assert data["total"] == len(data["chunks"])
    assert {a["doc_name"] for a in data["doc_aggs"]} == {page for _, page in pages(data)}
    return pages(data)


def check_conditions(client, two_kbs, cases):
    found = [(metadata_condition, pages_where(client, two_kbs, metadata_condition)) for metadata_condition, _ in cases]

    assert found == cases


def test_a_metadata_condition_on_front_matter_fields_keeps_the_documents_it_matches(client, two_kbs):
    check_conditions(client, two_kbs, [
        ({"logic": "and", "conditions": [condition("author", "is", "bob")]}, {("alpha", "Mesh.md")}),
        ({"conditions": [condition("author", "=", "BOB")]}, {("alpha", "Mesh.md")}),
        ({"logic": "and", "conditions": [condition("version", ">", 4)]},
         {("alpha", "Mesh.md"), ("alpha", "Shader.md")}),
        ({"logic": "and", "conditions": [condition("version", "≤", "3")]}, {("alpha", "Scene.md")}),
        ({"logic": "and", "conditions": [condition("published", "after", "2024-12-31")]},
         {("alpha", "Shader.md"), ("beta", "Camera.md")}),
        ({"logic": "and", "conditions": [condition("published", "before", "2024-05-02")]},
         {("alpha", "Scene.md"), ("beta", "Light.md")}),
        ({"logic": "and", "conditions": [condition("author", "empty")]},
         {("alpha", "Timer.md"), ("beta", "Shadow.md")}),
        ({"logic": "and", "conditions": [condition("author", "in", ["alice", "dave"])]},
         {("alpha", "Scene.md"), ("beta", "Light.md")}),
        ({"logic": "and", "conditions": [condition("author", "not in", ["alice", "bob", "carol", "dave", "erin"])]},
         {("alpha", "Timer.md"), ("beta", "Shadow.md")}),
    ])


def test_a_metadata_condition_on_labels_keeps_the_documents_it_matches(client, two_kbs):
    check_conditions(client, two_kbs, [
        ({"logic": "and", "conditions": [condition("product", "contains", "edit")]}, {("alpha", "Scene.md")}),
        ({"logic": "and", "conditions": [condition("product", "is", "viewer")]},
         {("beta", "Camera.md"), ("beta", "Light.md")}),
        ({"logic": "and", "conditions": [condition("level", "is", "beginner"), condition("version", "<", 4)]},
         {("alpha", "Scene.md")}),
    ])


def test_a_metadata_condition_on_built_in_fields_keeps_the_documents_it_matches(client, two_kbs):
    check_conditions(client, two_kbs, [
        ({"logic": "and", "conditions": [condition("title", "is", "Mesh")]}, {("alpha", "Mesh.md")}),
        ({"logic": "and", "conditions": [condition("title", "contains", "light")]}, {("beta", "Light.md")}),
        ({"logic": "and", "conditions": [condition("path", "is", "Scene.md")]}, {("alpha", "Scene.md")}),
        ({"logic": "and", "conditions": [condition("path", "start with", "Sha")]},
         {("alpha", "Shader.md"), ("beta", "Shadow.md")}),
        ({"logic": "and", "conditions": [condition("url", "is", "https://docs.example.com/engine/Scene")]},
         {("alpha", "Scene.md")}),
    ])


def test_a_metadata_condition_with_or_logic_keeps_documents_matching_any_condition(client, two_kbs):
    check_conditions(client, two_kbs, [
        ({"logic": "or", "conditions": [condition("author", "is", "bob"), condition("author", "is", "dave")]},
         {("alpha", "Mesh.md"), ("beta", "Light.md")}),
        ({"logic": "OR", "conditions": [condition("level", "is", "advanced"), condition("path", "is", "Timer.md")]},
         {("alpha", "Shader.md"), ("beta", "Camera.md"), ("alpha", "Timer.md")}),
    ])


def test_a_metadata_condition_that_matches_nothing_returns_nothing(client, two_kbs):
    conditions = [
        {"logic": "and", "conditions": [condition("author", "is", "nobody")]},
        {"logic": "and", "conditions": [condition("author", "is", "bob"), condition("author", "is", "alice")]},
        {"logic": "and", "conditions": [condition("published", "after", "2030-01-01")]},
        {"logic": "and", "conditions": []},
    ]

    found = [data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=EVERYTHING,
                                                       metadata={"metadata_condition": c}))) for c in conditions]

    assert [(d["total"], d["chunks"], d["doc_aggs"]) for d in found] == [(0, [], [])] * len(conditions)


def test_a_malformed_metadata_condition_is_400_with_code_1209(client, two_kbs):
    malformed = [
        {"logic": "and", "conditions": [condition("author", "resembles", "bob")]},
        {"logic": "xor", "conditions": [condition("author", "is", "bob")]},
        {"logic": "and", "conditions": [condition("", "is", "bob")]},
        {"logic": "and", "conditions": [condition("author", "in", 3)]},
        {"logic": "and", "conditions": ["author is bob"]},
        "author is bob",
    ]

    check_bad_requests(client, two_kbs, [({"metadata": {"metadata_condition": c}},
                                          (400, 1209, "invalid_metadata_condition")) for c in malformed])


# -- 4. the override layers --------------------------------------------------------------------------------


def test_metadata_rag_setting_overrides_the_request_which_overrides_the_app(client, two_kbs):
    cases = [  # app's top_n, request's, metadata's (None: no layer), chunks returned
        ({"top_n": 2}, {}, None, 2),
        ({"top_n": 2}, {"top_n": 3}, None, 3),
        ({"top_n": 2}, {"top_n": 3}, {"top_n": 1}, 1),
        ({"top_n": 2}, {}, {"top_n": 4}, 4),
        ({}, {"top_n": 3}, {}, 3),
        ({"top_n": 2}, {"top_n": None}, {"top_n": None}, 2),  # null leaves the field as the layer below set it
    ]
    found = []

    for app_setting, request_setting, metadata_setting, _ in cases:
        two_kbs.app.rag_setting = {"similarity_threshold": 0.0, **app_setting}
        two_kbs.app.save(update_fields=["rag_setting"])
        metadata = {"rag_setting": metadata_setting} if metadata_setting is not None else {}
        data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=request_setting, metadata=metadata)))
        found.append((len(data["chunks"]), data["total"]))

    # every chunk of both knowledge bases passes the app's threshold of 0
    assert found == [(count, 20) for *_, count in cases]


def test_each_field_comes_from_the_highest_layer_that_sets_it(client, two_kbs):
    two_kbs.app.rag_setting = {"top_n": 2, "dense_weight": 0.0, "similarity_threshold": 0.9,
                               "extra": {"from": "app"}}
    two_kbs.app.save(update_fields=["rag_setting"])
    body = body_of(two_kbs, rag_setting={"top_n": 3, "similarity_threshold": 0.5},
                   metadata={"rag_setting": {"similarity_threshold": 0.0}})
    overridden = body_of(two_kbs, rag_setting={"dense_weight": 1.0, **EVERYTHING},
                         metadata={"rag_setting": {"dense_weight": 0.0}})

    data = data_of(retrieve(client, two_kbs, body))
    keywords = data_of(retrieve(client, two_kbs, overridden))

    assert len(data["chunks"]) == 3  # the request's top_n
    assert data["total"] == 20  # the metadata's threshold
    assert all(c["similarity"] == pytest.approx(c["term_similarity"], abs=1e-6) for c in data["chunks"])  # the app's
    assert all(c["extra"] == {"from": "app"} for c in data["chunks"])
    # the metadata's dense weight over the request's
    assert all(c["similarity"] == pytest.approx(c["term_similarity"], abs=1e-6) for c in keywords["chunks"])
    assert any(c["term_similarity"] != c["vector_similarity"] for c in keywords["chunks"])


def test_a_bad_value_in_the_app_or_metadata_layer_is_1205(client, two_kbs):
    in_metadata = [failure_of(retrieve(client, two_kbs, body_of(two_kbs, metadata={"rag_setting": setting})))
                   for setting in ({"top_n": 0}, "top_n=1")]
    two_kbs.app.rag_setting = {"dense_weight": 2}
    two_kbs.app.save(update_fields=["rag_setting"])

    in_app = failure_of(retrieve(client, two_kbs, body_of(two_kbs)))

    assert in_metadata == [(400, 1205, "invalid_rag_setting")] * 2
    assert in_app == (400, 1205, "invalid_rag_setting")


# -- 5. failures ---------------------------------------------------------------------------------------------


def test_a_call_without_a_valid_key_is_401_with_code_1001_and_counts_nothing(client, two_kbs):
    from apikeys.services import api_key_revoke

    cases = [({}, "missing_api_key"), ({"HTTP_AUTHORIZATION": "Bearer nope_0123456789abcdef"}, "invalid_api_key"),
             ({"HTTP_AUTHORIZATION": "Bearer "}, "invalid_api_key"),
             ({"HTTP_AUTHORIZATION": "Token abc"}, "invalid_api_key"),
             ({"HTTP_AUTHORIZATION": f"Bearer {two_kbs.secret}x"}, "invalid_api_key")]
    before = stored_state()

    found = [failure_of(retrieve(client, two_kbs, body_of(two_kbs), headers=headers)) for headers, _ in cases]
    api_key_revoke(key=two_kbs.key)
    revoked = failure_of(retrieve(client, two_kbs, body_of(two_kbs)))

    assert found == [(401, 1001, error) for _, error in cases]
    assert revoked == (401, 1001, "invalid_api_key")
    assert not ApiKeyUsage.objects.exists()
    before["keys"] = [(pk, app, ApiKey.objects.get(pk=pk).revoked_at, quota) for pk, app, _, quota in before["keys"]]
    assert stored_state() == before


def test_a_key_bound_to_no_app_or_an_unpublished_app_is_403(client, two_kbs):
    before = stored_state()

    unbound = retrieve(client, two_kbs, body_of(two_kbs),
                       headers={"HTTP_AUTHORIZATION": f"Bearer {two_kbs.unbound_secret}"})
    RetrievalApp.objects.filter(pk=two_kbs.app.pk).update(published=False)
    before["apps"] = list(RetrievalApp.objects.order_by("pk").values_list("pk", "published", "rag_setting"))
    unpublished = retrieve(client, two_kbs, body_of(two_kbs))

    assert failure_of(unbound) == (403, 1103, "key_not_bound")
    assert failure_of(unpublished) == (403, 1105, "app_not_published")
    assert stored_state() == before


def failures_of(client, two_kbs, cases) -> list:
    """Post the body with each case's changes; return (changes, (status, code, error)) for every case."""
    results = []
    for changes, _expected in cases:
        body = body_of(two_kbs, **{name: value(two_kbs) if callable(value) else value
                                   for name, value in changes.items()})
        results.append((changes, failure_of(retrieve(client, two_kbs, body))))
    return results


def check_bad_requests(client, two_kbs, cases):
    """Each case answers its (status, code, error), changes nothing stored, and counts as one failed call."""
    before = stored_state()

    results = failures_of(client, two_kbs, cases)

    assert results == cases
    assert stored_state() == before
    assert usage_of(two_kbs.key) == (len(cases), len(cases))  # admitted, then failed


def test_a_bad_app_id_or_dialog_id_answers_its_code(client, two_kbs):
    check_bad_requests(client, two_kbs, [
        ({"app_id": DROP}, (400, 1101, "app_id_required")),
        ({"app_id": None}, (400, 1101, "app_id_required")),
        ({"app_id": "one"}, (400, 1102, "invalid_app_id")),
        ({"app_id": True}, (400, 1102, "invalid_app_id")),
        ({"app_id": DROP, "dialog_id": lambda s: s.app.pk + 100}, (403, 1104, "app_mismatch")),
        ({"app_id": lambda s: s.app.pk + 100}, (403, 1104, "app_mismatch")),
    ])


def test_a_missing_or_malformed_rag_setting_doc_ids_or_metadata_answers_its_code(client, two_kbs):
    check_bad_requests(client, two_kbs, [
        ({"rag_setting": DROP}, (400, 1204, "rag_setting_required")),
        ({"rag_setting": None}, (400, 1204, "rag_setting_required")),
        ({"rag_setting": "top_n=3"}, (400, 1201, "invalid_request")),
        ({"doc_ids": ["one"]}, (400, 1208, "invalid_doc_ids")),
        ({"doc_ids": [True]}, (400, 1208, "invalid_doc_ids")),
        ({"doc_ids": "1"}, (400, 1201, "invalid_request")),
        ({"metadata": "x"}, (400, 1201, "invalid_request")),
    ])


def test_bad_types_and_ranges_in_rag_setting_are_400_with_code_1205(client, two_kbs):
    bad = [{"top_k": 0}, {"top_k": 1025}, {"top_k": 2.5}, {"top_n": 0}, {"top_n": "3"}, {"dense_weight": 1.5},
           {"dense_weight": -0.1}, {"similarity_threshold": "0.2"}, {"similarity_threshold": True},
           {"rank_score_threshold": 2}, {"enable_rerank": "yes"}, {"enable_llm_rerank": 1},
           {"enable_agent_enhance_search": "true"}, {"enable_kb_priority": 1}, {"label_value_ids": "1,2"},
           {"label_value_ids": ["1"]}, {"kb_priority": {"p9": [1]}}, {"kb_priority": [1]}, {"extra": "x"}]

    check_bad_requests(client, two_kbs, [({"rag_setting": setting}, (400, 1205, "invalid_rag_setting"))
                                         for setting in bad])


def test_missing_malformed_or_unknown_kb_ids_answer_their_code(client, two_kbs):
    check_bad_requests(client, two_kbs, [
        ({"kb_ids": DROP}, (400, 1207, "kb_ids_required")),
        ({"kb_ids": []}, (400, 1207, "kb_ids_required")),
        ({"kb_ids": lambda s: s.alpha.pk}, (400, 1206, "invalid_kb_ids")),
        ({"kb_ids": "alpha"}, (400, 1206, "invalid_kb_ids")),
        ({"kb_ids": {"alpha": 1}}, (400, 1206, "invalid_kb_ids")),
        ({"kb_ids": [True]}, (400, 1206, "invalid_kb_ids")),
        ({"kb_ids": [999999]}, (404, 1301, "kb_not_found")),
        ({"kb_ids": lambda s: [s.alpha.pk, "nope"]}, (404, 1301, "kb_not_found")),
    ])


def test_an_empty_or_missing_question_is_400_with_code_1202(client, two_kbs):
    check_bad_requests(client, two_kbs, [
        ({"question": ""}, (400, 1202, "invalid_question")),
        ({"question": "   \n\t"}, (400, 1202, "invalid_question")),
        ({"question": DROP}, (400, 1202, "invalid_question")),
        ({"question": 42}, (400, 1202, "invalid_question")),
        ({"question": "x" * 2001}, (400, 1203, "question_too_long")),
    ])


def test_a_knowledge_base_outside_the_app_is_403_with_code_1302(client, two_kbs, tmp_path):
    gamma = make_gamma(tmp_path)
    before = stored_state()

    for kb_ids in ([gamma.pk], [two_kbs.alpha.pk, "gamma"]):
        response = retrieve(client, two_kbs, body_of(two_kbs, kb_ids=kb_ids))

        assert failure_of(response) == (403, 1302, "kb_not_allowed")
    assert stored_state() == before


def test_a_body_that_is_not_a_json_object_is_400_with_code_1201(client, two_kbs):
    bodies = [("{not json", "application/json"), ("[1, 2]", "application/json"), ('"question"', "application/json"),
              (urlencode({"app_id": two_kbs.app.pk, "question": MESH_QUESTION, "kb_ids": "alpha"}),
               "application/x-www-form-urlencoded"),
              (json.dumps(body_of(two_kbs)), "text/plain")]
    before = stored_state()

    found = [failure_of(client.post(URL, raw, content_type=content_type, **two_kbs.headers))
             for raw, content_type in bodies]
    multipart = failure_of(client.post(URL, {"app_id": two_kbs.app.pk, "question": MESH_QUESTION}, **two_kbs.headers))
    empty = client.post(URL, "", content_type="application/json", **two_kbs.headers)

    assert found == [(400, 1201, "invalid_request")] * len(bodies)
    assert multipart == (400, 1201, "invalid_request")
    assert empty.status_code == 400 and empty.json()["code"] != 0
    assert stored_state() == before


def test_other_methods_are_405(client, two_kbs):
    responses = [getattr(client, method)(URL, **two_kbs.headers) for method in ("get", "put", "delete")]

    assert [failure_of(r)[:2] for r in responses] == [(405, 1210)] * 3
    assert not RequestRecord.objects.exists()


# -- 6. rerank and enhanced search -----------------------------------------------------------------------------


@pytest.mark.parametrize("option, code, error", [
    ("enable_rerank", 1401, "rerank_not_configured"),
    ("enable_llm_rerank", 1402, "generation_not_configured"),
    ("enable_agent_enhance_search", 1402, "generation_not_configured"),
])
def test_an_option_without_its_model_is_refused_never_ignored(client, two_kbs, no_models, option, code, error):
    response = retrieve(client, two_kbs, body_of(two_kbs, rag_setting={option: True}))

    assert failure_of(response) == (NOT_CONFIGURED, code, error)
    assert RequestRecord.objects.get().error_code == error


def test_a_rerank_without_its_model_is_refused_even_when_no_chunk_passes(client, two_kbs, no_models):
    nothing_passes = {"similarity_threshold": 1.0}  # the best chunk's similarity is below 0.94

    responses = [retrieve(client, two_kbs, body_of(two_kbs, rag_setting={option: True, **nothing_passes}))
                 for option in ("enable_rerank", "enable_llm_rerank")]

    assert [(r.status_code, r.json()["code"]) for r in responses] == [(NOT_CONFIGURED, 1401), (NOT_CONFIGURED, 1402)]


def test_enable_rerank_orders_the_chunks_by_the_rerank_apis_score(client, two_kbs, engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="m")

    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "enable_rerank": True})))

    assert data["chunks"] and data["total"] == 20
    scores = [c["rank_score"] for c in data["chunks"]]
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)
    assert scores[-1] < scores[0]
    assert len(rerank_server.calls) == 1
    sent = rerank_server.calls[0]["body"]
    assert (sent["model"], sent["query"], len(sent["documents"])) == ("m", MESH_QUESTION, 20)


def test_a_rank_score_threshold_drops_the_lower_reranked_chunks(client, two_kbs, engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="m")
    everything = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**EVERYTHING, "enable_rerank": True})))

    kept = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={
        **EVERYTHING, "enable_rerank": True, "rank_score_threshold": 0.5})))

    assert 0 < kept["total"] < everything["total"]
    assert all(c["rank_score"] >= 0.5 for c in kept["chunks"])
    assert kept["total"] == len(kept["chunks"]) == sum(c["rank_score"] >= 0.5 for c in everything["chunks"])
    assert ids(kept) == [c["chunk_id"] for c in everything["chunks"] if c["rank_score"] >= 0.5]


def test_a_failing_rerank_api_is_502_with_code_1403(client, two_kbs, engine_settings, rerank_server):
    engine_settings(RERANK_BASE_URL=rerank_server.url, RERANK_MODEL="m")
    rerank_server.replies.append(("500", None))

    response = retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"enable_rerank": True}))

    assert failure_of(response) == (502, 1403, "rerank_failed")
    assert len(rerank_server.calls) == 1
    assert RequestRecord.objects.get().error_code == "rerank_failed"
    assert usage_of(two_kbs.key) == (1, 1)


def test_enable_llm_rerank_follows_the_models_order(client, two_kbs, engine_settings, llm_server):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")
    setting = {"similarity_threshold": 0.0, "top_k": 3}
    fused = ids(data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting=setting))))
    assert len(fused) == 3 and not llm_server.calls
    llm_server.replies.extend([("ok", "[3, 1, 2]"), ("ok", "[2]")])

    data = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**setting, "enable_llm_rerank": True})))
    partial = data_of(retrieve(client, two_kbs, body_of(two_kbs, rag_setting={**setting, "enable_llm_rerank": True})))

    assert ids(data) == [fused[2], fused[0], fused[1]]
    assert [c["rank_score"] for c in data["chunks"]] == pytest.approx([1.0, 2 / 3, 1 / 3], abs=1e-5)
    assert len(llm_server.calls) == 2
    prompt = json.dumps(llm_server.calls[0]["body"]["messages"], ensure_ascii=False)
    assert MESH_QUESTION in prompt and "JSON array" in prompt
    # passages the model leaves out follow the ranked one
    assert ids(partial)[0] == fused[1]
    assert [c["rank_score"] for c in partial["chunks"]] == [1.0, 0.0, 0.0]


def test_enhanced_search_asks_the_model_for_keywords_then_a_summary(client, two_kbs, engine_settings, llm_server):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")
    summary = "Set the light's intensity; it defaults to 1 [1]."
    llm_server.replies.extend([("ok", "Keywords: Light intensity 灯光 强度"), ("ok", summary)])
    body = body_of(two_kbs, question=LIGHT_QUESTION, kb_ids=[two_kbs.beta.pk],
                   rag_setting={"enable_agent_enhance_search": True, "top_n": 3})

    data = data_of(retrieve(client, two_kbs, body))

    assert data["summary"] == summary
    assert len(llm_server.calls) == 2
    rewrite, answer = (json.dumps(call["body"]["messages"], ensure_ascii=False) for call in llm_server.calls)
    assert LIGHT_QUESTION in rewrite and "keywords" in rewrite.lower()
    assert ".intensity" in answer  # the summary is written from the returned chunks
    assert data["chunks"][0]["docnm_kwd"] == "Light.md" and data["chunks"][0]["title"].endswith(".intensity : Float")
    assert "<em>intensity</em>" in data["chunks"][0]["highlight"]  # the model's keywords count as query terms
    rows = ApiKeyUsage.objects.filter(key=two_kbs.key, tool="retrieval_api")  # summed: a call may straddle midnight
    assert (usage_of(two_kbs.key), sum(r.prompt_tokens for r in rows)) == ((1, 0), 240)  # the fake model's 120 a call


def test_enhanced_search_with_a_failing_model_is_502_with_code_1404(client, two_kbs, engine_settings, llm_server):
    engine_settings(GENERATION_BASE_URL=llm_server.url, GENERATION_MODEL="fake")
    llm_server.replies.append(("500", ""))

    response = retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"enable_agent_enhance_search": True}))

    assert failure_of(response) == (502, 1404, "enhance_failed")


def test_app_id_wins_over_dialog_id(client, two_kbs):
    other = two_kbs.app.pk + 100

    winning = retrieve(client, two_kbs, body_of(two_kbs, app_id=two_kbs.app.pk, dialog_id=other))
    losing = retrieve(client, two_kbs, body_of(two_kbs, app_id=other, dialog_id=two_kbs.app.pk))
    alone = retrieve(client, two_kbs, body_of(two_kbs, app_id=DROP, dialog_id=two_kbs.app.pk))

    assert data_of(winning)["chunks"]
    assert failure_of(losing) == (403, 1104, "app_mismatch")
    assert data_of(alone)["chunks"]  # dialog_id alone names the app


# -- 7. the record and the key's usage ----------------------------------------------------------------------


def test_a_call_leaves_one_request_record_naming_the_key_app_and_knowledge_bases(client, two_kbs):
    response = retrieve(client, two_kbs, body_of(two_kbs, rag_setting={"top_n": 5}))
    data = data_of(response)
    record = RequestRecord.objects.get()
    failed = retrieve(client, two_kbs, body_of(two_kbs, kb_ids=[999999]))

    assert record.channel == "retrieval_api"
    assert record.request_id == response.json()["request_id"]
    assert record.api_key_prefix == two_kbs.key.prefix
    assert record.app == str(two_kbs.app.pk)
    assert set(record.kb.split(",")) == {"alpha", "beta"}
    assert record.hit_count == len(data["chunks"]) == 5
    assert record.error_code == ""
    assert record.question == MESH_QUESTION
    assert failure_of(failed) == (404, 1301, "kb_not_found")
    failure = RequestRecord.objects.exclude(pk=record.pk).get()
    assert (failure.channel, failure.error_code, failure.api_key_prefix, failure.app) == (
        "retrieval_api", "kb_not_found", two_kbs.key.prefix, str(two_kbs.app.pk))
    assert failure.request_id == failed.json()["request_id"]
    assert failure.hit_count == 0


def test_each_call_is_recorded_once_and_counted_in_the_keys_usage(client, two_kbs):
    for kb_ids in ([two_kbs.alpha.pk], ["beta"], [999999]):
        retrieve(client, two_kbs, body_of(two_kbs, kb_ids=kb_ids))

    records = list(RequestRecord.objects.order_by("pk"))
    assert [r.kb for r in records[:2]] == ["alpha", "beta"]
    assert [r.error_code for r in records] == ["", "", "kb_not_found"]
    assert usage_of(two_kbs.key) == (3, 1)
    assert set(ApiKeyUsage.objects.filter(key=two_kbs.key).values_list("tool", flat=True)) == {"retrieval_api"}


def test_a_key_over_its_daily_quota_is_429_with_code_1004_and_the_refusal_is_recorded(client, two_kbs,
                                                                                       time_machine):
    time_machine.move_to(local_moment("2026-03-10 10:00"), tick=False)  # both calls on one day
    two_kbs.key.daily_quota = 1
    two_kbs.key.save(update_fields=["daily_quota"])

    first = retrieve(client, two_kbs, body_of(two_kbs))
    second = retrieve(client, two_kbs, body_of(two_kbs))

    assert data_of(first)["chunks"]
    assert failure_of(second) == (429, 1004, "quota_exceeded")
    assert second["Retry-After"]
    assert usage_of(two_kbs.key) == (1, 0)
    records = list(RequestRecord.objects.order_by("pk"))
    assert [r.error_code for r in records] == ["", "quota_exceeded"]
    assert (records[1].channel, records[1].api_key_prefix) == ("retrieval_api", two_kbs.key.prefix)


# -- 8. the OpenAPI schema ---------------------------------------------------------------------------------


def test_the_endpoint_is_in_the_openapi_schema(client, db):
    response = client.get("/api/schema", {"format": "json"})

    assert response.status_code == 200
    operation = response.json()["paths"]["/api/v1/retrieval"]["post"]
    request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert set(request_schema["required"]) == {"question", "rag_setting", "kb_ids"}
    assert {"200", "400", "401", "403", "404", "503"} <= set(operation["responses"])


def test_a_call_the_face_refuses_leaves_one_record_and_counts_as_failed(client, two_kbs):
    other = RetrievalApp.objects.create(name="other", published=True)

    response = retrieve(client, two_kbs, {**body_of(two_kbs), "dialog_id": other.pk, "app_id": other.pk})

    assert failure_of(response) == (403, 1104, "app_mismatch")
    record = RequestRecord.objects.get()
    assert (record.channel, record.error_code, record.api_key_prefix) == ("retrieval_api", "app_mismatch",
                                                                          two_kbs.key.prefix)
    assert usage_of(two_kbs.key) == (1, 1)


def test_a_misspelt_member_is_read_corrected_as_every_search_reads_it(client, two_kbs):
    exact = data_of(retrieve(client, two_kbs, body_of(two_kbs, question="Mesh.castShadow", kb_ids=["alpha"])))
    misspelt = data_of(retrieve(client, two_kbs, body_of(two_kbs, question="Mesh.castShadw", kb_ids=["alpha"])))

    assert ids(misspelt)[:3] == ids(exact)[:3]
    top = misspelt["chunks"][0]
    assert top["content_with_weight"].startswith("### .castShadow") and top["term_similarity"] == 1.0
    assert "<em>castShadow</em>" in top["highlight"]
    assert top["question"] == "Mesh.castShadw"  # echoed as asked

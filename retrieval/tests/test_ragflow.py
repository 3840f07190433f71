"""RAGFlow's `POST /api/v1/retrieval`, served at /ragflow/api/v1/retrieval: the real `ragflow_sdk` client against
the live server, then the raw HTTP contract (fields, pages, `total`, `doc_aggs`, highlights, metadata conditions,
error codes) with Django's test client, and the one request record each call leaves."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from ragflow_sdk import RAGFlow

from retrieval.tests.conftest import usage_by_tool
from rag.models import Document, RequestRecord
from rag.pipeline import reset_engine
from rag.tests.conftest import make_kb

URL = "/ragflow/api/v1/retrieval"
QUESTION = "How do I add a mesh to a scene?"
ALPHA_PAGES = {"Mesh.md", "Scene.md", "Shader.md", "Timer.md"}
BETA_PAGES = {"Camera.md", "Light.md", "Shadow.md"}
ALL_PAGES = ALPHA_PAGES | BETA_PAGES


def ragflow_post(client, body, *, secret: str | None):
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    return client.post(URL, json.dumps(body), content_type="application/json", headers=headers)


def retrieve(client, two_kbs, **fields) -> dict:
    """POST a retrieval over both knowledge bases (fields override); return `data` of a code 0 reply."""
    body = {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk, two_kbs.beta.pk], **fields}
    response = ragflow_post(client, body, secret=two_kbs.secret)
    payload = response.json()
    assert (response.status_code, payload["code"]) == (200, 0), payload
    return payload["data"]


def failure(client, two_kbs, body, *, secret: str | None = "bound") -> tuple[int, dict]:
    response = ragflow_post(client, body, secret=two_kbs.secret if secret == "bound" else secret)
    payload = response.json()
    assert isinstance(payload["code"], int) and payload["code"] != 0, payload
    assert isinstance(payload["message"], str) and payload["message"], payload
    assert payload.get("data") is None, payload
    return response.status_code, payload


def sdk(live_server, secret: str) -> RAGFlow:
    return RAGFlow(api_key=secret, base_url=live_server.url + "/ragflow")


def document_ids(kb) -> dict[str, str]:
    """Each page of a knowledge base by its Document id, as the API spells the id."""
    return {str(d.pk): d.path for d in Document.objects.filter(kb=kb)}


def page_text(kb, path: str) -> str:
    return (Path(kb.source_dir) / path).read_text(encoding="utf-8")


# -- the real SDK over HTTP ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sdk_retrieve_returns_chunks_of_the_dataset_with_our_ids_and_scores(live_server, two_kbs, client):
    alpha = str(two_kbs.alpha.pk)

    chunks = sdk(live_server, two_kbs.secret).retrieve(dataset_ids=[alpha], question=QUESTION)

    assert chunks, "the SDK got no chunks"
    raw = retrieve(client, two_kbs, dataset_ids=[alpha], similarity_threshold=0.2, vector_similarity_weight=0.3,
                   top_k=1024)["chunks"]
    assert [c.id for c in chunks] == [c["id"] for c in raw]  # the SDK's defaults: threshold 0.2, weight 0.3
    pages = document_ids(two_kbs.alpha)
    for chunk in chunks:
        assert chunk.dataset_id == alpha
        assert chunk.document_id in pages
        assert chunk.content and chunk.content.split("\n")[0] in page_text(two_kbs.alpha, pages[chunk.document_id])
        assert chunk.important_keywords and all(isinstance(k, str) for k in chunk.important_keywords)
        assert 0.0 <= chunk.term_similarity <= 1.0 and 0.0 <= chunk.vector_similarity <= 1.0
        assert chunk.similarity == pytest.approx(0.3 * chunk.vector_similarity + 0.7 * chunk.term_similarity,
                                                 abs=1e-5)
        assert chunk.similarity >= 0.2
    similarities = [c.similarity for c in chunks]
    assert similarities == sorted(similarities, reverse=True)
    assert pages[chunks[0].document_id] in {"Mesh.md", "Scene.md"}


@pytest.mark.django_db(transaction=True)
def test_sdk_retrieve_takes_a_slug_and_several_datasets(live_server, two_kbs):
    client = sdk(live_server, two_kbs.secret)

    chunks = client.retrieve(dataset_ids=["alpha", str(two_kbs.beta.pk)], question="灯光的颜色",
                             similarity_threshold=0.0)

    assert {c.dataset_id for c in chunks} == {str(two_kbs.alpha.pk), str(two_kbs.beta.pk)}
    assert document_ids(two_kbs.beta)[chunks[0].document_id] == "Light.md"


@pytest.mark.django_db(transaction=True)
def test_sdk_retrieve_with_document_ids_keeps_those_documents(live_server, two_kbs):
    mesh = Document.objects.get(kb=two_kbs.alpha, path="Mesh.md")

    chunks = sdk(live_server, two_kbs.secret).retrieve(dataset_ids=[str(two_kbs.alpha.pk)], question=QUESTION,
                                                       document_ids=[str(mesh.pk)], similarity_threshold=0.0)

    assert chunks and {c.document_id for c in chunks} == {str(mesh.pk)}
    assert len(chunks) == 3  # Mesh.md's chunks: the page, its constructor and .castShadow


@pytest.mark.django_db(transaction=True)
def test_sdk_pages_concatenate_to_one_bigger_page_in_a_stable_order(live_server, two_kbs):
    client = sdk(live_server, two_kbs.secret)
    ids = [str(two_kbs.alpha.pk), str(two_kbs.beta.pk)]

    def page(number: int, size: int) -> list[str]:
        return [c.id for c in client.retrieve(dataset_ids=ids, question=QUESTION, page=number, page_size=size,
                                              similarity_threshold=0.0)]

    pages = []
    for number in range(1, 30):
        pages.append(page(number, 2))
        if not pages[-1]:
            break
    everything = [chunk_id for p in pages for chunk_id in p]

    assert pages[-1] == [] and all(len(p) == 2 for p in pages[:-2]) and 1 <= len(pages[-2]) <= 2
    assert pages[0] + pages[1] + pages[2] == page(1, 6)
    assert everything == page(1, 100)
    assert len(everything) == len(set(everything)) == 20  # every chunk of both knowledge bases, once
    assert page(2, 2) == pages[1]


@pytest.mark.django_db(transaction=True)
def test_sdk_similarity_threshold_drops_the_chunks_below_it(live_server, two_kbs):
    client = sdk(live_server, two_kbs.secret)
    ids = [str(two_kbs.alpha.pk)]

    everything = client.retrieve(dataset_ids=ids, question=QUESTION, similarity_threshold=0.0, page_size=100)
    strict = client.retrieve(dataset_ids=ids, question=QUESTION, similarity_threshold=0.6, page_size=100)

    assert len(everything) == 12  # every chunk of alpha
    assert strict and all(c.similarity >= 0.6 for c in strict)
    assert [c.id for c in strict] == [c.id for c in everything if c.similarity >= 0.6]
    assert len(strict) < len(everything)


@pytest.mark.django_db(transaction=True)
def test_sdk_vector_similarity_weight_0_ranks_by_terms_and_1_by_vectors(live_server, two_kbs):
    client = sdk(live_server, two_kbs.secret)
    ids = [str(two_kbs.alpha.pk), str(two_kbs.beta.pk)]

    by_terms = client.retrieve(dataset_ids=ids, question=QUESTION, vector_similarity_weight=0,
                               similarity_threshold=0.0, page_size=100)
    by_vectors = client.retrieve(dataset_ids=ids, question=QUESTION, vector_similarity_weight=1,
                                 similarity_threshold=0.0, page_size=100)

    assert len(by_terms) == len(by_vectors) == 20
    assert all(c.similarity == pytest.approx(c.term_similarity, abs=1e-6) for c in by_terms)
    assert all(c.similarity == pytest.approx(c.vector_similarity, abs=1e-6) for c in by_vectors)
    for ranked in (by_terms, by_vectors):
        assert [c.similarity for c in ranked] == sorted((c.similarity for c in ranked), reverse=True)
    assert [c.id for c in by_terms] != [c.id for c in by_vectors]


@pytest.mark.django_db(transaction=True)
def test_sdk_metadata_condition_filters_the_documents(live_server, two_kbs):
    condition = {"logic": "and", "conditions": [{"name": "product", "comparison_operator": "is", "value": "viewer"}]}

    chunks = sdk(live_server, two_kbs.secret).retrieve(dataset_ids=[str(two_kbs.beta.pk)], question="场景",
                                                       similarity_threshold=0.0, metadata_condition=condition)

    pages = document_ids(two_kbs.beta)
    assert {pages[c.document_id] for c in chunks} == {"Camera.md", "Light.md"}


@pytest.mark.django_db(transaction=True)
def test_sdk_retrieve_with_a_bad_key_raises_our_message(live_server, two_kbs):
    with pytest.raises(Exception, match="Missing or unknown API key"):
        sdk(live_server, "rk_not-a-real-key").retrieve(dataset_ids=[str(two_kbs.alpha.pk)], question=QUESTION)


@pytest.mark.django_db(transaction=True)
def test_sdk_retrieve_from_an_unknown_dataset_raises(live_server, two_kbs):
    with pytest.raises(Exception, match="Knowledge base 999999 does not exist"):
        sdk(live_server, two_kbs.secret).retrieve(dataset_ids=["999999"], question=QUESTION)


# -- the raw HTTP contract ---------------------------------------------------------------------------------


def test_a_request_with_every_optional_field_null_takes_the_defaults(client, two_kbs):
    nulls = {name: None for name in (
        "document_ids", "page", "page_size", "similarity_threshold", "vector_similarity_weight", "top_k",
        "rerank_id", "keyword", "highlight", "cross_languages", "metadata_condition", "use_kg", "toc_enhance")}

    data = retrieve(client, two_kbs, **nulls)

    assert data["chunks"] and len(data["chunks"]) <= 30
    assert all(c["similarity"] >= 0.2 for c in data["chunks"])
    assert all("highlight" not in c for c in data["chunks"])
    assert data["total"] == len(data["chunks"])  # 20 chunks in all: the default page of 30 holds them
    for chunk in data["chunks"]:  # RAGFlow's default weight, 0.3, not the open API's 0.5
        assert chunk["similarity"] == pytest.approx(0.3 * chunk["vector_similarity"] + 0.7 * chunk["term_similarity"],
                                                    abs=1e-5)


def test_a_chunk_has_ragflows_field_names(client, two_kbs):
    chunk = retrieve(client, two_kbs, dataset_ids=[two_kbs.alpha.pk], page_size=1)["chunks"][0]

    for name, kind in {"id": str, "content": str, "content_ltks": str, "document_id": str, "document_keyword": str,
                       "dataset_id": str, "image_id": str, "important_keywords": list, "positions": list,
                       "similarity": float, "vector_similarity": float, "term_similarity": float}.items():
        assert isinstance(chunk[name], kind), (name, chunk)
    assert chunk["dataset_id"] == str(two_kbs.alpha.pk)
    assert document_ids(two_kbs.alpha)[chunk["document_id"]] == chunk["document_keyword"]


def test_total_counts_every_chunk_above_the_threshold_across_all_pages(client, two_kbs):
    everything = retrieve(client, two_kbs, similarity_threshold=0.0, page_size=100)
    scores = sorted({c["similarity"] for c in everything["chunks"]}, reverse=True)
    threshold = round((scores[7] + scores[8]) / 2, 6)  # between two scores: no chunk sits on it
    above = [c["id"] for c in everything["chunks"] if c["similarity"] >= threshold]

    pages = [retrieve(client, two_kbs, similarity_threshold=threshold, page=n, page_size=3) for n in range(1, 6)]

    assert everything["total"] == 20 and len(above) >= 8
    assert all(p["total"] == len(above) for p in pages)  # not the page size
    assert [c["id"] for p in pages for c in p["chunks"]] == above
    assert [len(p["chunks"]) for p in pages][0] == 3 and pages[-1]["chunks"] == []


def test_a_page_past_the_end_is_empty_with_the_same_total(client, two_kbs):
    first = retrieve(client, two_kbs, page_size=5)

    past = retrieve(client, two_kbs, page=50, page_size=5)

    assert first["total"] > 0
    assert (past["total"], past["chunks"]) == (first["total"], [])
    assert past["doc_aggs"] == first["doc_aggs"]


def test_highlight_true_adds_the_content_with_matching_words_in_em(client, two_kbs):
    plain = retrieve(client, two_kbs, dataset_ids=[two_kbs.alpha.pk])["chunks"]

    lit = retrieve(client, two_kbs, dataset_ids=[two_kbs.alpha.pk], highlight=True)["chunks"]

    assert all("highlight" not in c for c in plain)
    assert [c["id"] for c in lit] == [c["id"] for c in plain]
    for chunk in lit:
        assert html.unescape(re.sub(r"</?em>", "", chunk["highlight"])) == chunk["content"]
    assert "<em>Mesh</em>" in lit[0]["highlight"] or "<em>Scene</em>" in lit[0]["highlight"]
    assert all("<em>" in c["highlight"] for c in lit if c["term_similarity"] > 0)


def test_doc_aggs_count_each_documents_chunks_over_every_page(client, two_kbs):
    everything = retrieve(client, two_kbs, similarity_threshold=0.0, page_size=100)

    one = retrieve(client, two_kbs, similarity_threshold=0.0, page_size=1)

    counts: dict[str, int] = {}
    for chunk in everything["chunks"]:
        counts[chunk["document_id"]] = counts.get(chunk["document_id"], 0) + 1
    aggs = one["doc_aggs"]
    assert isinstance(aggs, list) and all(set(a) == {"doc_name", "doc_id", "count"} for a in aggs)
    assert {a["doc_id"]: a["count"] for a in aggs} == counts
    assert sum(a["count"] for a in aggs) == one["total"] == 20
    assert [a["count"] for a in aggs] == sorted((a["count"] for a in aggs), reverse=True)
    names = {**document_ids(two_kbs.alpha), **document_ids(two_kbs.beta)}
    assert all(names[a["doc_id"]] == a["doc_name"] for a in aggs)
    assert aggs == everything["doc_aggs"]


def test_dataset_ids_may_be_integers_strings_or_slugs(client, two_kbs):
    as_int = retrieve(client, two_kbs, dataset_ids=[two_kbs.alpha.pk])

    as_text = retrieve(client, two_kbs, dataset_ids=[str(two_kbs.alpha.pk)])
    as_slug = retrieve(client, two_kbs, dataset_ids=["alpha"])

    assert as_int["chunks"] and as_int == as_text == as_slug


# -- metadata_condition --------------------------------------------------------------------------------------


def condition(name, operator, value=None) -> dict:
    return {"name": name, "comparison_operator": operator, "value": value}


RAGFLOW_CASES = [
    ("and", [condition("author", "is", "alice")], {"Scene.md"}),
    ("and", [condition("author", "is", "ALICE")], {"Scene.md"}),
    ("and", [condition("author", "not empty"), condition("author", "not is", "alice")],
     {"Mesh.md", "Shader.md", "Camera.md", "Light.md"}),
    ("and", [condition("author", "contains", "a")], {"Scene.md", "Shader.md", "Light.md"}),
    ("and", [condition("author", "start with", "c")], {"Shader.md"}),
    ("and", [condition("version", ">", 5)], {"Shader.md"}),
    ("and", [condition("version", "≥", 5)], {"Mesh.md", "Shader.md"}),
    ("and", [condition("version", "≥", "3")], {"Scene.md", "Mesh.md", "Shader.md"}),
    ("and", [condition("published", ">", "2024-12-31")], {"Shader.md", "Camera.md"}),
    ("and", [condition("published", "≥", "2024-06-15")], {"Mesh.md", "Shader.md", "Camera.md"}),
    ("and", [condition("version", "empty")], {"Timer.md", "Camera.md", "Light.md", "Shadow.md"}),
    ("and", [condition("version", "not empty")], {"Mesh.md", "Scene.md", "Shader.md"}),
    ("and", [condition("level", "is", "advanced")], {"Shader.md", "Camera.md"}),
    ("and", [condition("product", "is", "editor")], {"Scene.md"}),
    ("and", [condition("level", "is", "beginner"), condition("product", "is", "viewer")], {"Light.md"}),
    ("or", [condition("author", "is", "alice"), condition("level", "is", "advanced")],
     {"Scene.md", "Shader.md", "Camera.md"}),
    ("or", [condition("version", ">", 6), condition("author", "is", "dave")], {"Shader.md", "Light.md"}),
]


def test_metadata_condition_keeps_the_documents_it_matches(client, two_kbs):
    wrong = {}
    for n, (logic, conditions, pages) in enumerate(RAGFLOW_CASES):
        data = retrieve(client, two_kbs, similarity_threshold=0.0, page_size=100,
                        metadata_condition={"logic": logic, "conditions": conditions})
        found = ({c["document_keyword"] for c in data["chunks"]}, {a["doc_name"] for a in data["doc_aggs"]},
                 data["total"] == len(data["chunks"]))
        if found != (pages, pages, True):
            wrong[n] = (logic, conditions, pages, found)

    assert wrong == {}


NOTHING = [
    {"logic": "and", "conditions": [condition("author", "is", "zed")]},
    {"logic": "and", "conditions": [condition("author", "is", "alice"), condition("author", "is", "bob")]},
    {"logic": "or", "conditions": [condition("level", "is", "expert"), condition("product", "is", "cloud")]},
    {"logic": "and", "conditions": []},  # RAGFlow: a condition object without conditions matches nothing
]


def test_a_metadata_condition_that_matches_nothing_returns_nothing(client, two_kbs):
    found = [retrieve(client, two_kbs, similarity_threshold=0.0, metadata_condition=c) for c in NOTHING]

    assert [(d["total"], d["chunks"], bool(d["doc_aggs"])) for d in found] == [(0, [], False)] * len(NOTHING)


def test_a_null_metadata_condition_filters_nothing(client, two_kbs):
    data = retrieve(client, two_kbs, similarity_threshold=0.0, page_size=100, metadata_condition=None)

    assert {c["document_keyword"] for c in data["chunks"]} == ALL_PAGES


# -- failures: {code, message} -------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [{"question": QUESTION}, {"question": QUESTION, "dataset_ids": []},
                                  {"question": QUESTION, "dataset_ids": None}], ids=["absent", "empty", "null"])
def test_missing_dataset_ids_is_code_102(client, two_kbs, body):
    status, payload = failure(client, two_kbs, body)

    assert (status, payload["code"]) == (200, 102)


def test_an_unknown_dataset_is_code_102(client, two_kbs):
    status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk, 999999]})

    assert (status, payload["code"]) == (200, 102)
    assert "999999" in payload["message"]


def test_a_dataset_outside_the_keys_app_is_code_102(client, two_kbs, tmp_path):
    (tmp_path / "gamma").mkdir()
    gamma = make_kb(tmp_path / "gamma", slug="gamma")

    status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [gamma.pk]})

    assert (status, payload["code"]) == (200, 102)


@pytest.mark.parametrize("secret", ["rk_not-a-real-key", None, ""], ids=["unknown", "absent", "empty"])
def test_a_bad_key_is_code_109_with_http_401(client, two_kbs, secret):
    status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk]},
                              secret=secret)

    assert (status, payload["code"]) == (401, 109)


@pytest.mark.parametrize("page_size", [0, -1, "ten"])
def test_a_page_size_that_is_not_a_positive_integer_is_code_101(client, two_kbs, page_size):
    status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk],
                                                "page_size": page_size})

    assert (status, payload["code"]) == (200, 101)


def test_a_missing_question_is_refused(client, two_kbs):
    status, _payload = failure(client, two_kbs, {"dataset_ids": [two_kbs.alpha.pk]})

    assert status == 200


def test_a_malformed_metadata_condition_is_refused(client, two_kbs):
    body = {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk],
            "metadata_condition": {"logic": "and", "conditions": [condition("author", "is like", "alice")]}}

    status, payload = failure(client, two_kbs, body)

    assert status == 200 and "is like" in payload["message"]


def test_rerank_id_without_a_rerank_api_is_refused_not_ignored(client, two_kbs, settings):
    settings.RAG_ENGINE = {**settings.RAG_ENGINE, "RERANK_BASE_URL": "", "LLM_RERANK": False}
    reset_engine()

    status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [two_kbs.alpha.pk],
                                                "rerank_id": "BAAI/bge-reranker-v2-m3"})

    assert status == 200
    assert "rerank" in payload["message"].lower()


# -- one request, one record -----------------------------------------------------------------------------------


def test_one_request_leaves_one_ragflow_record_and_one_counted_call(client, two_kbs):
    retrieve(client, two_kbs, dataset_ids=[two_kbs.alpha.pk])

    records = list(RequestRecord.objects.all())
    assert len(records) == 1
    assert (records[0].channel, records[0].api_key_prefix, records[0].kind) == ("ragflow", two_kbs.key.prefix,
                                                                                 "search")
    assert records[0].question == QUESTION and records[0].kb == "alpha"
    assert usage_by_tool(two_kbs.key) == {"ragflow": (1, 0)}


def test_a_failed_request_leaves_one_record_and_counts_a_failure(client, two_kbs):
    failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [999999]})

    records = list(RequestRecord.objects.all())
    assert len(records) == 1
    assert (records[0].channel, records[0].api_key_prefix) == ("ragflow", two_kbs.key.prefix)
    assert records[0].error_code == "kb_not_found"
    assert usage_by_tool(two_kbs.key) == {"ragflow": (1, 1)}


def test_a_request_that_finds_a_dataset_still_building_counts_neither_as_a_call_nor_as_a_failure(client, two_kbs):
    from rag.models import IndexVersion
    from rag.services.knowledge import kb_ensure

    building = kb_ensure(slug="gamma", source_dir=str(two_kbs.alpha.source_dir))  # its first build still running
    IndexVersion.objects.create(kb=building, name="first-build", model_id="building")
    two_kbs.app.knowledge_bases.add(building)

    _status, payload = failure(client, two_kbs, {"question": QUESTION, "dataset_ids": [building.pk]})

    assert "Ask again in a few seconds" in payload["message"]
    assert RequestRecord.objects.get().error_code == "index_building"
    assert usage_by_tool(two_kbs.key) in ({}, {"ragflow": (0, 0)})

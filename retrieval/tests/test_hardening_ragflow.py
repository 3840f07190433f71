"""Issue 28 on the retrieval faces: every route under /ragflow/ answers in RAGFlow's JSON envelope, the dataset
listings ragflow-sdk calls before it retrieves work with a key bound to an app (the real client against a live
server), lone surrogates are refused as bad input on every face, and a front-matter url that is not http(s) or
relative never reaches a reply."""

from __future__ import annotations

import json

import pytest
from ragflow_sdk import RAGFlow

from rag.tests.conftest import make_built_kb


def sdk(live_server, secret: str) -> RAGFlow:
    return RAGFlow(api_key=secret, base_url=live_server.url + "/ragflow")


# -- RAGFlow's envelope everywhere under /ragflow/ ----------------------------------------------------------------


@pytest.mark.parametrize("method, path", [
    ("get", "/ragflow/"), ("get", "/ragflow/api/v1/nothing"), ("post", "/ragflow/api/v1/chats"),
    ("get", "/ragflow/api/v1/datasets/1/documents/2/chunks"), ("delete", "/ragflow/api/v1/datasets"),
    ("get", "/ragflow/api/v1/retrieval"), ("put", "/ragflow/api/v1/datasets/1"),
])
def test_every_route_under_ragflow_answers_ragflows_json_envelope(client, two_kbs, method, path):
    response = getattr(client, method)(path, HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["code"], int) and body["code"] != 0 and isinstance(body["message"], str)


def test_an_unknown_ragflow_route_is_code_404(client, db):
    response = client.get("/ragflow/api/v1/agents")

    assert (response.status_code, response.json()["code"]) == (404, 404)


# -- dataset listings --------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sdk_list_datasets_lists_the_apps_knowledge_bases(live_server, two_kbs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "Other.md").write_text("# Other\n\nNot in the app.\n", encoding="utf-8")
    make_built_kb(outside, slug="outside")

    datasets = sdk(live_server, two_kbs.secret).list_datasets()

    assert sorted(d.name for d in datasets) == ["alpha", "beta"]
    alpha = next(d for d in datasets if d.name == "alpha")
    assert alpha.id == str(two_kbs.alpha.pk) and alpha.document_count == 4 and alpha.chunk_count > 0


@pytest.mark.django_db(transaction=True)
def test_sdk_list_datasets_by_name_and_then_retrieve_from_it(live_server, two_kbs):
    client = sdk(live_server, two_kbs.secret)

    [beta] = client.list_datasets(name="beta")
    chunks = client.retrieve(dataset_ids=[beta.id], question="场景")

    assert beta.id == str(two_kbs.beta.pk) and chunks
    assert {chunk.dataset_id for chunk in chunks} == {beta.id}


@pytest.mark.django_db(transaction=True)
def test_sdk_lists_a_datasets_documents(live_server, two_kbs):
    [alpha] = sdk(live_server, two_kbs.secret).list_datasets(id=str(two_kbs.alpha.pk))

    documents = alpha.list_documents()
    page = alpha.list_documents(page=2, page_size=3)

    assert sorted(d.name for d in documents) == ["Mesh.md", "Scene.md", "Shader.md", "Timer.md"]
    assert all(d.dataset_id == alpha.id and d.chunk_count > 0 and d.run == "DONE" for d in documents)
    assert len(page) == 1


@pytest.mark.django_db(transaction=True)
def test_sdk_list_datasets_with_a_bad_key_raises_our_message(live_server, two_kbs):
    with pytest.raises(Exception, match="API key"):
        sdk(live_server, "rk_not-a-real-key").list_datasets()


def test_documents_of_a_dataset_outside_the_keys_app_are_code_102(client, two_kbs, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "Other.md").write_text("# Other\n\nNot in the app.\n", encoding="utf-8")
    kb = make_built_kb(outside, slug="outside")

    response = client.get(f"/ragflow/api/v1/datasets/{kb.pk}/documents", HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    assert response.json()["code"] == 102 and "Other.md" not in response.content.decode()


def test_a_dataset_listing_with_a_bad_page_size_is_code_101(client, two_kbs):
    response = client.get("/ragflow/api/v1/datasets", {"page_size": "lots"},
                          HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    assert response.json()["code"] == 101


# -- lone surrogates ---------------------------------------------------------------------------------------------

LONE = '"index \\ud800"'


@pytest.mark.parametrize("path, raw, envelope", [
    ("/api/v1/retrieval", '{"question": %s, "app_id": 1, "rag_setting": {}, "kb_ids": ["alpha"]}' % LONE, "seed"),
    ("/api/v1/retrieval", '{"question": "mesh", "app_id": 1, "rag_setting": {}, "kb_ids": ["alpha"], %s: 1}' % LONE, "seed"),
    ("/ragflow/api/v1/retrieval", '{"question": %s, "dataset_ids": ["alpha"]}' % LONE, "ragflow"),
    ("/ragflow/api/v1/retrieval", '{"question": "mesh", "dataset_ids": [%s]}' % LONE, "ragflow"),
    ("/dify/retrieval", '{"knowledge_id": "alpha", "query": %s, "retrieval_setting": {"top_k": 2}}' % LONE, "dify"),
    ("/dify/retrieval", '{"knowledge_id": %s, "query": "mesh", "retrieval_setting": {"top_k": 2}}' % LONE, "dify"),
])
def test_a_lone_surrogate_is_refused_as_bad_input_on_every_retrieval_face(client, two_kbs, path, raw, envelope):
    raw = raw.replace('"app_id": 1', f'"app_id": {two_kbs.app.pk}')

    response = client.post(path, data=raw.encode(), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    body = response.json()
    if envelope == "seed":
        assert (response.status_code, body["code"]) == (400, 1201), body
    elif envelope == "ragflow":
        assert (response.status_code, body["code"]) == (200, 101), body
    else:
        assert response.status_code == 400 and body["error"] == "invalid_request", body


# -- urls from front matter --------------------------------------------------------------------------------------


@pytest.fixture
def linked_kb(db, tmp_path, two_kbs):
    """A knowledge base in the key's app whose pages give a `url` in their front matter, good and bad."""
    folder = tmp_path / "linked"
    folder.mkdir()
    pages = {"Evil.md": "javascript:alert(document.cookie)", "Data.md": "data:text/html;base64,PHNjcmlwdD4=",
             "Tabbed.md": "java\tscript:alert(1)", "Upper.md": " JavaScript:alert(1)",
             "Good.md": "https://docs.example.com/good", "Relative.md": "/docs/relative"}
    for name, url in pages.items():
        title = name.removesuffix(".md")
        (folder / name).write_text(f"---\nurl: {json.dumps(url)}\n---\n# {title}\n\nThe lighthouse beam sweeps "
                                   f"the harbour every ten seconds ({title}).\n", encoding="utf-8")
    kb = make_built_kb(folder, slug="linked")
    two_kbs.app.knowledge_bases.add(kb)
    return kb


def urls_by_page(chunks, name_of, url_of) -> dict[str, object]:
    return {name_of(chunk): url_of(chunk) for chunk in chunks}


def test_only_http_or_relative_front_matter_urls_reach_the_open_api(client, two_kbs, linked_kb):
    response = client.post("/api/v1/retrieval", data=json.dumps({
        "question": "lighthouse beam harbour", "app_id": two_kbs.app.pk, "kb_ids": ["linked"],
        "rag_setting": {"top_n": 20, "similarity_threshold": 0}}), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    urls = urls_by_page(response.json()["data"]["chunks"], lambda c: c["docnm_kwd"], lambda c: c["url"])
    assert urls == {"Evil.md": "", "Data.md": "", "Tabbed.md": "", "Upper.md": "",
                    "Good.md": "https://docs.example.com/good", "Relative.md": "/docs/relative"}


def test_only_http_or_relative_front_matter_urls_reach_ragflow_and_dify(client, two_kbs, linked_kb):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {two_kbs.secret}"}
    ragflow = client.post("/ragflow/api/v1/retrieval", data=json.dumps({
        "question": "lighthouse beam harbour", "dataset_ids": ["linked"], "similarity_threshold": 0}),
        content_type="application/json", **auth).json()
    dify = client.post("/dify/retrieval", data=json.dumps({
        "knowledge_id": "linked", "query": "lighthouse beam harbour",
        "retrieval_setting": {"top_k": 20, "score_threshold": 0}}), content_type="application/json", **auth).json()

    expected_bad = {"Evil.md", "Data.md", "Tabbed.md", "Upper.md"}
    ragflow_urls = urls_by_page(ragflow["data"]["chunks"], lambda c: c["document_keyword"], lambda c: c["url"])
    dify_urls = urls_by_page(dify["records"], lambda r: r["metadata"]["path"], lambda r: r["metadata"]["url"])
    assert len(ragflow_urls) == len(dify_urls) == 6
    assert all(ragflow_urls[name] == dify_urls[name] == "" for name in expected_bad)
    assert ragflow_urls["Good.md"] == dify_urls["Good.md"] == "https://docs.example.com/good"
    assert ragflow_urls["Relative.md"] == dify_urls["Relative.md"] == "/docs/relative"
    assert "javascript" not in json.dumps([ragflow, dify]).lower()


@pytest.mark.parametrize("path, body", [
    ("/api/v1/retrieval", {"question": "mesh", "app_id": 0, "rag_setting": {}, "kb_ids": ["alpha", "beta"]}),
    ("/ragflow/api/v1/retrieval", {"question": "mesh", "dataset_ids": ["alpha", "beta"]}),
    ("/dify/retrieval", {"knowledge_id": "alpha", "query": "mesh", "retrieval_setting": {"top_k": 2}}),
])
def test_every_retrieval_face_says_which_docs_answered_in_a_header(client, two_kbs, path, body):
    """Issue 30: the index version, its build time and source revision ride in X-Docs-Freshness; the bodies keep the
    shapes their SDKs parse."""
    from rag.models import IndexVersion

    IndexVersion.objects.filter(pk=two_kbs.alpha.active_version_id).update(source_revision="3f1c2a9")
    if "app_id" in body:
        body = {**body, "app_id": two_kbs.app.pk}

    response = client.post(path, data=json.dumps(body), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {two_kbs.secret}")

    assert response.status_code == 200, response.content
    alpha = two_kbs.alpha.active_version
    assert f"alpha@{alpha.name} built " in response["X-Docs-Freshness"]
    assert "rev 3f1c2a9" in response["X-Docs-Freshness"]

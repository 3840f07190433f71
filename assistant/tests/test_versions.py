"""Issue 32 on the web faces: /api/search and /api/chat take an SDK version (`sdk_version`, or `kb` as
`slug@version`), say which they read, lead the answer with what the version lacks, and refuse a version that is
not indexed with the ones that are."""

from __future__ import annotations

import json

import pytest

from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db


@pytest.fixture
def sdk(tmp_path, settings):
    settings.RAG_DEFAULT_KB = "fx"
    return build_sdk(tmp_path)


def post(client, path: str, body: dict):
    return client.post(path, data=json.dumps(body), content_type="application/json")


def test_search_reads_latest_or_the_version_asked(client, sdk):
    latest = post(client, "/api/search", {"question": "Viewer setSize"}).json()
    older = post(client, "/api/search", {"question": "Viewer setSize", "sdk_version": "2.0"}).json()
    written = post(client, "/api/search", {"question": "Viewer setSize", "kb": "fx", "sdk_version": "1.4"}).json()
    assert (latest["kb"], latest["sdk_version"]) == ("fx@2.1", "2.1")
    assert (older["kb"], older["sdk_version"]) == ("fx@2.0", "2.0")
    assert (written["kb"], written["sdk_version"]) == ("fx@1.4", "1.4")
    assert latest["version"] == sdk["2.1"].active_version.name  # `version` stays the index version read


def test_chat_says_what_the_version_asked_lacks(client, sdk):
    body = post(client, "/api/chat", {"question": "How does captureFrame work?", "sdk_version": "2.0"}).json()
    assert body["sdk_version"] == "2.0"
    assert body["answer"].startswith("`captureFrame` was added in 2.1; you asked about 2.0")
    assert body["version_notes"][0]["documented_as"] == "Viewer.captureFrame"


def test_a_version_that_is_not_indexed_is_a_404_naming_the_indexed_ones(client, sdk):
    response = post(client, "/api/search", {"question": "Viewer", "sdk_version": "3.0"})
    body = response.json()
    assert response.status_code == 404 and body["code"] == "sdk_version_not_found"
    assert body["details"]["versions"] == ["1.4", "2.0", "2.1"] and body["details"]["aliases"] == {"latest": "2.1"}
    bad = post(client, "/api/chat", {"question": "Viewer", "sdk_version": "2.0; rm"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_sdk_version"  # checked by the question service


def test_the_chat_page_offers_each_sdk_once_with_its_versions(client, sdk):
    page = client.get("/").content.decode()
    assert '<option value="fx"' in page and 'value="fx@2.0"' not in page
    assert 'data-versions="[&quot;2.1&quot;, &quot;2.0&quot;, &quot;1.4&quot;]"' in page


def test_each_citation_names_the_version_it_comes_from(client, sdk):
    body = post(client, "/api/chat", {"question": "How do I resize the Viewer canvas with setSize?",
                                      "sdk_version": "1.4"}).json()
    assert body["citations"] and {c["sdk_version"] for c in body["citations"]} == {"1.4"}


"""Issue 32 on CG_RAG: a scope names an SDK version (`fx@2.0`, an alias such as `fx@latest`), the SDK's own scope
reads its latest version, and a version that is not indexed is an unknown scope naming the indexed ones."""

from __future__ import annotations

import json

import pytest

from rag.tests.sdk_fixture import build_sdk

pytestmark = pytest.mark.django_db


@pytest.fixture
def sdk(tmp_path):
    return build_sdk(tmp_path)


def retrieve(client, scope: str):
    return client.post("/cg-rag/retrieve-rerank", data=json.dumps({"query": "Viewer setSize", "scope": scope}),
                       content_type="application/json")


@pytest.mark.parametrize("scope, read", [("fx", "fx@2.1"), ("fx@2.0", "fx@2.0"), ("fx@latest", "fx@2.1")])
def test_a_scope_reads_the_sdk_version_it_names(client, sdk, scope, read):
    body = retrieve(client, scope).json()
    assert body["pipeline"]["active_scope"] == read
    assert body["num_docs"] > 0


def test_a_version_that_is_not_indexed_is_an_unknown_scope(client, sdk):
    response = retrieve(client, "fx@3.0")
    assert response.status_code == 400
    assert "1.4, 2.0, 2.1" in json.dumps(response.json())


def test_health_does_not_count_an_sdk_without_pages_of_its_own_as_not_ready(client, sdk):
    issues = client.get("/cg-rag/health").json()["config_issues"]
    assert not [issue for issue in issues if issue["code"] == "scope_not_ready"]

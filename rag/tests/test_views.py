"""The server-rendered search page and the health check."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_home_page_renders_without_knowledge_bases(client):
    response = client.get("/search")

    assert response.status_code == 200
    assert "python manage.py rag reindex" in response.content.decode()


def test_the_home_page_lists_knowledge_bases(client, built_kb):
    response = client.get("/search")

    page = response.content.decode()
    assert response.status_code == 200
    assert built_kb.active_version.name in page and "<option value=\"sdk\" selected>" in page


def test_a_question_shows_its_results(client, built_kb):
    response = client.get("/search", {"q": "PerspectiveCamera 的 fov 默认是多少"})

    page = response.content.decode()
    assert response.status_code == 200
    assert "[1] PerspectiveCamera.fov" in page
    assert "PerspectiveCamera.md · 属性 &gt; .fov : Float" in page
    assert response.context["result"]["version"] == built_kb.active_version.name


def test_a_script_question_is_escaped(client, built_kb):
    response = client.get("/search", {"q": "<script>alert(1)</script> PerspectiveCamera"})

    page = response.content.decode()
    assert response.status_code == 200
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; PerspectiveCamera" in page


def test_a_service_error_is_shown_on_the_page(client, built_kb):
    response = client.get("/search", {"q": "Fog", "kb": "nope"})

    assert response.status_code == 200
    assert "<strong>kb_not_found</strong>" in response.content.decode()


def test_healthz_reports_ok_and_ready_knowledge_bases(client, built_kb):
    response = client.get("/healthz")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["knowledge_bases_ready"] == 1 and body["available_scopes"] == ["sdk"]


def test_healthz_is_ok_before_any_build(client):
    body = client.get("/healthz").json()
    assert body["ok"] is True and body["knowledge_bases_ready"] == 0 and body["retrieval_method"] == ""

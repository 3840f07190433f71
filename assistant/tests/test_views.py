"""The chat page as served: its security policy, no inline script, example questions, the indexing state."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone

from conftest import local_moment
from rag.models import IndexVersion
from rag.tests.conftest import make_built_kb, make_kb

pytestmark = pytest.mark.django_db
MOMENT = local_moment("2026-03-10 12:00")


def test_the_page_sends_a_policy_that_allows_only_its_own_scripts(client):
    response = client.get("/")

    policy = dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    assert policy["script-src"] == "'self'"
    assert policy["connect-src"] == "'self' ws://testserver wss://testserver"
    assert policy["object-src"] == "'none'"


def test_the_page_has_no_inline_script_and_no_inline_handlers(client):
    html = client.get("/").content.decode()

    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S)
    assert scripts == [""]  # one script, chat.js, loaded from its own file
    assert re.search(r"<script\b[^>]*\bsrc=\"[^\"]+chat\.js\"", html)
    assert not re.search(r"\son[a-z]+\s*=", html)
    assert "javascript:" not in html


def test_the_page_uses_no_emoji_for_its_icons(client):
    html = client.get("/").content.decode()

    assert not re.search(r"[\U0001F300-\U0001FAFF\u2600-\u27BF]", html)
    assert "<svg" in html


@pytest.mark.parametrize(("accept_language", "first_example"), [
    ("en-US,en;q=0.9", "How do I rebuild the index?"),
    ("zh-CN,zh;q=0.9", "怎么重建索引？"),
])
def test_the_empty_page_offers_example_questions_in_the_browser_language(client, accept_language, first_example):
    html = client.get("/", headers={"Accept-Language": accept_language}).content.decode()

    chips = re.findall(r'<button type="button" class="example" data-question="([^"]+)">', html)
    assert chips[0] == first_example
    assert len(chips) == 3


@pytest.mark.time_machine(MOMENT, tick=False)
def test_a_knowledge_base_still_being_indexed_is_listed_with_its_progress(client, corpus_copy, settings):
    settings.RAG_DEFAULT_KB = "sdk"
    kb = make_kb(corpus_copy)
    IndexVersion.objects.create(kb=kb, name="first", model_id="m", progress_done=41, progress_total=100,
                                heartbeat_at=timezone.now())

    html = client.get("/").content.decode()

    assert '<option value="sdk" data-versions="[]" selected>sdk</option>' in html
    assert re.search(r'<p id="status" class="meta waiting" role="status">Indexing the sdk knowledge base: 41%', html)


@pytest.mark.time_machine(MOMENT, tick=False)
def test_a_build_that_stopped_beating_is_not_shown_as_indexing(client, corpus_copy, settings, time_machine):
    settings.RAG_DEFAULT_KB = "sdk"
    kb = make_kb(corpus_copy)
    IndexVersion.objects.create(kb=kb, name="first", model_id="m", heartbeat_at=timezone.now())
    time_machine.shift(3600)

    html = client.get("/").content.decode()

    assert '<p id="status" class="meta" role="status"></p>' in html


def test_a_served_knowledge_base_shows_no_indexing_state(client, corpus_copy, settings):
    settings.RAG_DEFAULT_KB = "sdk"
    make_built_kb(corpus_copy)

    html = client.get("/").content.decode()

    assert '<option value="sdk" data-versions="[]" selected>sdk</option>' in html
    assert '<p id="status" class="meta" role="status"></p>' in html

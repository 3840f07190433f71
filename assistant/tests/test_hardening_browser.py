"""The chat page when its socket closes before the answer (issue 28): it asks over HTTP instead (slow)."""

from __future__ import annotations

import pytest

from assistant.tests.test_browser import browser  # noqa: F401 - the fixture
from rag.tests.conftest import make_built_kb
from rag.tests.live import daphne, free_port


@pytest.fixture
def daphne_without_redis(transactional_db):
    """Daphne whose cache and channel layer point at a Redis that does not answer (nothing listens there)."""
    with daphne(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0") as url:
        yield url


@pytest.mark.slow
def test_when_the_socket_closes_before_the_answer_the_page_asks_over_http(daphne_without_redis, browser,  # noqa: F811
                                                                           corpus_copy):
    make_built_kb(corpus_copy)
    page = browser.new_page()
    sockets, chats = [], []
    page.on("websocket", lambda socket: sockets.append(socket))
    page.on("response", lambda response: chats.append(response.status) if response.url.endswith("/api/chat") else None)
    page.goto(daphne_without_redis + "/")

    page.fill("#question", "PerspectiveCamera 的 fov 默认值是多少？")
    page.press("#question", "Enter")
    page.wait_for_selector("#a1 .badges .badge", timeout=60_000)

    assert sockets, "the page did not try its socket first"
    assert chats == [200]
    assert "50" in page.inner_text("#a1 .answer")

"""The web token pool when the model spends nothing (issue 16): an open breaker or a model that fails fast
gives back the whole reservation; a model that wrote part of an answer keeps it."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache

from assistant.services import web_chat, web_chat_stream, token_pool_today
from conftest import JsonHandler, local_moment, serve_on_loopback
from rag.pipeline import reset_engine
from rag.tests.conftest import make_built_kb

pytestmark = [pytest.mark.django_db, pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)]
QUESTION = {"question": "PerspectiveCamera 的 far 默认值", "kb": "sdk"}


@pytest.fixture
def kb(db, corpus_copy):
    return make_built_kb(corpus_copy)


@pytest.fixture
def model_at(settings):
    """Point the engine at a chat model's base URL for this test (breaker threshold 2)."""

    def configure(url: str) -> None:
        settings.RAG_ENGINE = {**settings.RAG_ENGINE, "GENERATION_BASE_URL": url, "GENERATION_MODEL": "fake-model",
                               "GENERATION_READ_TIMEOUT": 2, "BREAKER_THRESHOLD": 2}
        cache.clear()
        reset_engine()

    yield configure
    reset_engine()
    cache.clear()


def streamed_final(**question) -> dict:
    return [event for event in web_chat_stream(**question)][-1]


def test_token_pool_refunds_answers_the_model_failed_fast_or_the_open_breaker_skipped(kb, llm_server, model_at):
    model_at(llm_server.url)
    llm_server.replies.extend([("500", ""), ("500", "")])

    answers = [web_chat(**QUESTION), web_chat(**QUESTION), web_chat(**QUESTION)]  # the third: circuit open

    assert [a["reason"] for a in answers] == ["generation_http", "generation_http", "circuit_open"]
    assert len(llm_server.calls) == 2
    assert token_pool_today().spent == 0


def test_token_pool_refunds_a_streamed_answer_the_model_failed_fast(kb, llm_server, model_at):
    model_at(llm_server.url)
    llm_server.replies.append(("500", ""))

    final = streamed_final(**QUESTION)

    assert (final["type"], final["degraded"], final["reason"]) == ("final", True, "generation_http")
    assert token_pool_today().spent == 0


def test_token_pool_keeps_the_reservation_of_a_stream_cut_mid_answer(kb, model_at, settings):
    class Handler(JsonHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802 - the http.server API
            self.read_json()
            raw = "".join(f"data: {json.dumps({'choices': [{'delta': {'content': w}}]})}\n\n"
                          for w in ("The ", "far ", "plane ")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(raw) + 500))  # promises more than it sends
            self.end_headers()
            self.wfile.write(raw)
            self.wfile.flush()
            self.close_connection = True

    with serve_on_loopback(Handler) as url:
        model_at(url)

        final = streamed_final(**QUESTION)

    assert (final["degraded"], final["reason"]) == (True, "generation_connection")
    assert token_pool_today().spent == settings.RAG_WEB_TOKEN_ESTIMATE  # it wrote, and reported no usage


def test_token_pool_is_charged_what_the_model_reported(kb, llm_server, model_at):
    model_at(llm_server.url)

    answer = web_chat(**QUESTION)

    assert answer["mode"] == "llm" and token_pool_today().spent == answer["usage"]["total_tokens"] > 0

"""CG_RAG's SSE answers on the answer threads (rag.streams, issue 16): with every thread taken a stream is
refused with 429 `capacity.exceeded` before any frame, and a refused stream gives nothing back it did not take."""

from __future__ import annotations

import json

import pytest

from rag.streams import answer_streams, reset_answer_streams

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_answer_thread(settings):
    settings.RAG_ANSWER_STREAMS = {"THREADS": 1, "DEADLINE": 60.0}
    reset_answer_streams()
    yield answer_streams()
    reset_answer_streams()


def test_a_stream_beyond_the_answer_threads_is_refused_before_any_frame(client, sdk_kb, one_answer_thread):
    held = one_answer_thread.reserve()
    try:
        response = client.post("/cg-rag/rag/stream", data=json.dumps({"query": "Fog near", "scope": "sdk"}),
                               content_type="application/json")
    finally:
        held.release()

    assert response.status_code == 429 and int(response["Retry-After"]) > 0
    body = response.json()
    assert body["error"]["code"] == "capacity.exceeded" and body["error"]["details"]["resource"] == "answer_streams"
    assert one_answer_thread.in_use() == 0


def test_a_slot_taken_for_a_stream_that_never_starts_is_given_back_on_close(one_answer_thread):
    from cgrag.http import sse_response

    response = sse_response("req-x", lambda cancelled: iter(()))
    assert one_answer_thread.in_use() == 1
    response.close()
    assert one_answer_thread.in_use() == 0

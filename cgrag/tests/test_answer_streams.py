"""CG_RAG's SSE answers on the answer threads (rag.streams, issue 16): with every thread taken a stream waits, then
ends with an `error` and a `final` frame under HTTP 200 (issue 28, seed 004), and gives nothing back it did not take."""

from __future__ import annotations

import json

import pytest


pytestmark = pytest.mark.django_db(transaction=True)


def test_a_stream_beyond_the_answer_threads_is_not_refused_before_its_headers(client, sdk_kb, one_answer_thread,
                                                                             settings):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "WAIT_TIMEOUT": 0}  # the wait: cgrag/tests/test_hardening_streams
    held = one_answer_thread.reserve()
    try:
        response = client.post("/cg-rag/rag/stream", data=json.dumps({"query": "Fog near", "scope": "sdk"}),
                               content_type="application/json")
        text = b"".join(response).decode()
    finally:
        held.release()

    assert response.status_code == 200 and text.startswith("event: error\n") and "capacity.exceeded" in text
    assert "answer_streams" in text and "\n\nevent: final\n" in text
    assert one_answer_thread.in_use() == 0


def test_a_slot_taken_for_a_stream_that_never_starts_is_given_back_on_close(one_answer_thread):
    from cgrag.http import sse_response

    response = sse_response("req-x", lambda cancelled: iter(()))
    assert one_answer_thread.in_use() == 1
    response.close()
    assert one_answer_thread.in_use() == 0

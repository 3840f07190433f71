"""Issue 28, seed 004's stream contract under load: a stream waits for an answer thread like any request waits for
capacity (RAG_CAPACITY's WAIT_TIMEOUT), and one that still gets none ends with an SSE `error` then `final`, with
HTTP 200; the answer pool's bound stays; a stream whose error is 503 `index_building` counts against no limit. No
test here depends on timing: the waits are seen through the pool."""

from __future__ import annotations

import json

import pytest

from conftest import local_moment

pytestmark = pytest.mark.django_db(transaction=True)

QUESTION = "PerspectiveCamera 的 fov 默认值是多少？"


def frames(response) -> list[tuple[str, dict]]:
    text = b"".join(response).decode()
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def stream(client, body=None):
    return client.post("/cg-rag/rag/stream", data=json.dumps(body or {"query": QUESTION, "scope": "sdk", "topk": 3}),
                       content_type="application/json", HTTP_X_REQUEST_ID="req-wait")


def test_a_stream_that_gets_no_answer_thread_in_the_wait_is_error_then_final_with_200(client, sdk_kb, settings,
                                                                                     one_answer_thread):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "WAIT_TIMEOUT": 0}
    held = one_answer_thread.reserve()
    try:
        response = stream(client)
        events = frames(response)
    finally:
        held.release()

    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    assert [name for name, _ in events] == ["error", "final"]
    error, final = events[0][1], events[1][1]
    assert (error["code"], error["details"]["resource"], error["request_id"]) == (
        "capacity.exceeded", "answer_streams", "req-wait")
    assert error["retryable"] is True and error["details"]["max"] == 1
    assert final["generation"]["ok"] is False and final["generation"]["error"]["code"] == "capacity.exceeded"
    assert final["query"] == QUESTION and final["request_id"] == "req-wait"
    assert one_answer_thread.in_use() == 0


def test_a_stream_waits_for_an_answer_thread_and_answers_when_one_frees(client, sdk_kb, settings, one_answer_thread,
                                                                       monkeypatch):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "WAIT_TIMEOUT": 3600}  # never reached: the slot frees first
    held = one_answer_thread.reserve()
    reserve, refusals = one_answer_thread.reserve, []

    def reserve_then_free():  # the other stream ends after this one has been refused once
        slot = reserve()
        if slot is None:
            refusals.append(1)
            held.release()
        return slot

    monkeypatch.setattr(one_answer_thread, "reserve", reserve_then_free)

    response = stream(client)
    events = frames(response)

    assert response.status_code == 200 and refusals == [1]
    names = [name for name, _ in events]
    assert names[0] == "progress" and "retrieval" in names and names[-1] == "final"
    assert all(data["code"] != "capacity.exceeded" for name, data in events if name == "error")
    assert events[-1][1]["retrieval"]["num_docs"] > 0  # no model here: the generation's own error, not capacity
    assert one_answer_thread.in_use() == 0


def test_the_answer_pool_stays_bounded_while_streams_wait(client, sdk_kb, settings, one_answer_thread, monkeypatch):
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "WAIT_TIMEOUT": 3600}
    held = one_answer_thread.reserve()
    reserve, seen = one_answer_thread.reserve, []

    def watched():
        seen.append(one_answer_thread.in_use())
        slot = reserve()
        if slot is None and len(seen) == 3:
            held.release()
        return slot

    monkeypatch.setattr(one_answer_thread, "reserve", watched)

    events = frames(stream(client))

    assert seen[:3] == [1, 1, 1] and max(seen) <= 1
    assert events[-1][0] == "final" and one_answer_thread.in_use() == 0


def test_a_vision_stream_that_gets_no_answer_thread_ends_with_error_then_its_final(client, settings,
                                                                                  one_answer_thread):
    from cgrag.tests.test_vision import DATA_URL

    settings.RAG_VISION = {**settings.RAG_VISION, "BASE_URL": "http://127.0.0.1:9", "MODEL": "vlm"}
    settings.RAG_CAPACITY = {**settings.RAG_CAPACITY, "WAIT_TIMEOUT": 0}
    held = one_answer_thread.reserve()
    try:
        response = client.post("/cg-rag/vision/answer/stream", data=json.dumps({"images": [DATA_URL]}),
                               content_type="application/json")
        events = frames(response)
    finally:
        held.release()

    assert response.status_code == 200 and [name for name, _ in events] == ["error", "final"]
    assert events[0][1]["code"] == "capacity.exceeded"
    final = events[1][1]
    assert (final["ok"], final["generation_mode"], final["error"]["code"]) == (False, "vision_answer",
                                                                             "capacity.exceeded")


@pytest.mark.time_machine(local_moment("2026-03-10 12:00"), tick=False)
def test_a_stream_answered_index_building_counts_against_no_limit(client, building_kb, settings):
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "CGRAG_GENERATE_PER_MINUTE": 1}

    first = frames(stream(client))
    second = stream(client)

    assert second.status_code == 200
    for events in (first, frames(second)):
        assert [name for name, _ in events][-2:] == ["error", "final"]
        assert events[-2][1]["code"] == "index_building"

"""Bounded work per question (issue 28): the model reads at most 512 tokens of a question, and one client's
long questions neither queue everyone else's behind them nor wait without bound."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from rag.engine.embed import MAX_QUERY_TOKENS, CostGate, EmbeddingBusy

LONG_QUESTION = "如何设置相机的位置和朝向，并在场景中添加一盏平行光？" * 60  # about 1,500 tokens


def wait_until(condition, limit: float = 60.0) -> None:
    """Wait for another thread to reach a state (polling, generous: the machine may be loaded)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "the other thread never got there"
        time.sleep(0.005)


def test_a_long_question_is_cut_to_what_the_model_reads(real_embedder):
    model = real_embedder._model
    assert model.token_count(LONG_QUESTION, True) > 2 * MAX_QUERY_TOKENS

    readable, tokens = real_embedder.readable_query(LONG_QUESTION)

    assert LONG_QUESTION.startswith(readable)
    assert tokens == model.token_count(readable, True) <= MAX_QUERY_TOKENS
    assert model.token_count(LONG_QUESTION[: len(readable) + 1], True) > MAX_QUERY_TOKENS  # the longest such prefix
    vector = real_embedder.embed_query(LONG_QUESTION)
    assert np.allclose(vector, np.asarray(model.query(readable), dtype=np.float32), atol=1e-6)


def test_a_short_question_is_read_whole(real_embedder):
    question = "How do I set the camera's position?"
    assert real_embedder.readable_query(question) == (question, real_embedder._model.token_count(question, True))


def test_a_cheap_embedding_goes_before_dear_ones_that_came_first():
    gate = CostGate()
    release, order = threading.Event(), []

    def holder():
        with gate.hold(cheap=False):
            release.wait(60)

    def waiter(name: str, cheap: bool):
        with gate.hold(cheap=cheap):
            order.append(name)

    threads = [threading.Thread(target=holder)]
    threads[0].start()
    wait_until(lambda: gate._busy)
    for name, cheap, waiting in (("long-1", False, 1), ("long-2", False, 2), ("short", True, 3)):
        threads.append(threading.Thread(target=waiter, args=(name, cheap)))
        threads[-1].start()
        wait_until(lambda waiting=waiting: gate.waiting() == waiting)
    release.set()
    for thread in threads:
        thread.join(60)

    assert order == ["short", "long-1", "long-2"]
    assert gate.waiting() == 0 and not gate._busy


def test_the_queue_is_bounded_and_so_is_the_wait():
    gate = CostGate(max_waiting=1, wait_seconds=60)
    release, refused = threading.Event(), []

    def hold_then_release():
        with gate.hold(cheap=True):
            release.wait(60)

    holder = threading.Thread(target=hold_then_release)
    holder.start()
    wait_until(lambda: gate._busy)
    queued = threading.Thread(target=lambda: gate.hold(cheap=True).__enter__())
    queued.daemon = True
    queued.start()
    wait_until(lambda: gate.waiting() == 1)

    with pytest.raises(EmbeddingBusy):  # the queue is full: refused at once
        with gate.hold(cheap=True):
            refused.append("ran")
    impatient = CostGate(wait_seconds=0)
    with impatient.hold(cheap=True):
        with pytest.raises(EmbeddingBusy):  # waited its (zero) time: refused, and out of the queue
            with impatient.hold(cheap=True):
                refused.append("ran")
    assert impatient.waiting() == 0
    release.set()
    holder.join(60)
    assert refused == []


@pytest.mark.django_db
def test_a_full_queue_answers_503_busy_and_changes_nothing(client, built_kb, monkeypatch):
    from rag.models import RequestRecord
    from rag.pipeline import get_engine

    monkeypatch.setattr(get_engine().embedder, "gate", CostGate(max_waiting=0))
    response = client.post("/api/search", {"question": "an unseen question about cameras", "kb": "sdk"},
                           content_type="application/json")

    assert response.status_code == 503
    assert response.json()["code"] == "busy"
    assert response["Retry-After"] == "2"
    assert RequestRecord.objects.get(request_id=response.json()["request_id"]).error_code == "busy"

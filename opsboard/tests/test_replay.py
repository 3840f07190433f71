"""Replay asks again the way the request was asked (its top_k and other options) and says "no answer" when
neither side has one, rather than "same answer"."""

from __future__ import annotations

import pytest

from opsboard.services import recorded_options, replay_request
from opsboard.tests.test_ops import ops_user
from rag.models import RequestRecord
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db

QUESTION = "Raycaster setFromCamera 怎么用？"


def test_a_search_recorded_with_top_k_8_is_replayed_with_8(client, corpus_copy):
    from assistant.services import web_search

    make_built_kb(corpus_copy)
    default = web_search(question=QUESTION, kb="sdk")
    asked = web_search(question=QUESTION, kb="sdk", top_k=8)
    client.force_login(ops_user())

    response = client.post(f"/ops/requests/{asked['request_id']}/replay")

    record = RequestRecord.objects.get(request_id=asked["request_id"])
    replays = RequestRecord.objects.filter(channel="eval", kind="search")
    assert (len(default["results"]), len(asked["results"])) == (5, 8)  # the question has more than 5 chunks
    assert record.arguments == {"top_k": 8} and recorded_options(record) == {"top_k": 8}
    assert [r.hit_count for r in replays] == [8, 8] and all(r.arguments == {"top_k": 8} for r in replays)
    assert response.context["same"]["active"]["evidence"] == "same"
    assert "top_k=8" in response.content.decode()


def test_recorded_mode_and_rerank_are_asked_again_and_bad_values_left_out():
    def options(arguments):
        return recorded_options(RequestRecord(arguments=arguments))

    assert options({"top_k": 3, "mode": "bm25", "rerank": False, "rewrite": True}) == {
        "top_k": 3, "mode": "bm25", "rerank": False, "rewrite": True}
    assert options({"question": "q", "top_k": None, "kb": "sdk"}) == {}  # an MCP call that left top_k out
    assert options({"top_k": "eight", "mode": "fast", "rerank": "yes"}) == {}
    assert options({"top_k": True}) == {}


def test_a_search_has_no_answer_on_either_side_and_says_so(client, corpus_copy):
    from assistant.services import web_search

    make_built_kb(corpus_copy)
    asked = web_search(question=QUESTION, kb="sdk", top_k=8)
    client.force_login(ops_user())

    replay = replay_request(asked["request_id"])
    page = client.post(f"/ops/requests/{asked['request_id']}/replay").content.decode()

    assert replay["same"]["active"]["answer"] == "none" and replay["same"]["recorded"]["answer"] == "none"
    assert "no answer" in page and ">same</td>" in page  # the plan and the evidence are the same; the answer is none

"""Issue 16, hardening: a missing or corrupt active index. A question is answered from the previous good version
when that opens, else refused with 503 `index_unavailable` and `Retry-After`, on every face (they all ask
through the question service)."""

from __future__ import annotations

import shutil

import pytest

from infra.errors import ServiceError
from rag.engine.index import CHUNKS_FILE
from rag.models import Channel, RequestRecord
from rag.services.knowledge import index_build
from rag.services.questions import QuestionRequest, question_search
from rag.tests.conftest import make_built_kb

pytestmark = pytest.mark.django_db
QUESTION = "PerspectiveCamera 的 fov 默认值"


def post(client, path, payload):
    return client.post(path, payload, content_type="application/json")


def break_version(engine, kb, name: str, how: str) -> None:
    """Make a version's files unusable, as a lost disk or a half-copied folder would, and drop its open reader."""
    folder = engine.store.version_dir(kb.slug, name)
    if how == "missing":
        shutil.rmtree(folder)
    else:
        (folder / CHUNKS_FILE).write_bytes(b'{"chunk_id": [')
    engine.forget(kb.slug, name)


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_missing_or_corrupt_active_index_is_answered_from_the_previous_good_version(client, corpus_copy, engine,
                                                                                      how):
    kb = make_built_kb(corpus_copy)
    previous = kb.active_version.name
    current = index_build(kb).name
    break_version(engine, kb, current, how)

    response = post(client, "/api/search", {"question": QUESTION, "kb": "sdk"})

    body = response.json()
    assert response.status_code == 200, body
    assert body["version"] == previous and body["results"][0]["class_name"] == "PerspectiveCamera"
    assert RequestRecord.objects.get(request_id=body["request_id"]).index_version == previous


@pytest.mark.parametrize("path", ["/api/search", "/api/chat"])
def test_a_corrupt_active_index_with_nothing_to_fall_back_to_answers_503_index_unavailable(client, corpus_copy,
                                                                                           engine, path):
    kb = make_built_kb(corpus_copy)
    break_version(engine, kb, kb.active_version.name, "corrupt")

    response = post(client, path, {"question": QUESTION, "kb": "sdk"})

    assert (response.status_code, response.json()["code"]) == (503, "index_unavailable")
    assert int(response["Retry-After"]) > 0
    record = RequestRecord.objects.get(request_id=response.json()["request_id"])
    assert (record.outcome, record.error_code) == ("failed", "index_unavailable")


def test_a_named_version_that_does_not_open_is_index_unavailable_not_a_500(corpus_copy, engine):
    kb = make_built_kb(corpus_copy)
    candidate = index_build(kb, activate=False).name
    break_version(engine, kb, candidate, "missing")

    with pytest.raises(ServiceError) as raised:
        question_search(QuestionRequest(question=QUESTION, kb="sdk", version=candidate, channel=Channel.EVAL))

    assert (raised.value.code, raised.value.status) == ("index_unavailable", 503)
    assert "Retry-After" in raised.value.headers


def test_a_version_that_failed_to_open_is_not_read_again_on_every_question(corpus_copy, engine, monkeypatch):
    kb = make_built_kb(corpus_copy)
    broken = kb.active_version.name
    break_version(engine, kb, broken, "corrupt")
    opened = []
    real_open = engine.store.load_manifest
    monkeypatch.setattr(engine.store, "load_manifest", lambda kb, version: opened.append(version) or real_open(kb, version))

    for _ in range(3):
        with pytest.raises(ServiceError):
            question_search(QuestionRequest(question=QUESTION, kb="sdk", channel=Channel.WEB))

    assert opened.count(broken) == 1  # tried again after Retry-After, not on each question

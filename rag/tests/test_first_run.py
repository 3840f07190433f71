"""A fresh install (issue 12): vectors shipped with a source folder, the build handed to the worker while
questions are told "indexing …" with its progress, the model warmed up at start, and the bundled docs' pack."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.management import call_command

from infra.errors import ServiceError
from rag.engine.chunk import chunk_documents
from rag.engine.ingest import read_folder
from rag.engine.vectorpack import PACK_DIR, pack_path, read_pack, write_pack
from rag.models import Channel, IndexVersion
from rag.services.knowledge import index_build, index_build_queue, vectors_export
from rag.services.questions import QuestionRequest, question_search
from rag.tests.conftest import make_kb

Status = IndexVersion.Status


# -- the pack ----------------------------------------------------------------------------------------


def test_a_pack_reads_back_the_vectors_it_was_written_with(tmp_path):
    vectors = np.random.default_rng(7).normal(size=(3, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    path = write_pack(tmp_path, "some/model@8", ["c", "a", "b"], vectors)
    read = read_pack(tmp_path, "some/model@8", 8)

    assert path == pack_path(tmp_path, "some/model@8") and path.parent.name == PACK_DIR
    assert sorted(read) == ["a", "b", "c"]
    for key, row in zip("cab", vectors):
        assert np.allclose(read[key], row, atol=2e-3)  # float16 on disk, renormalised on reading
        assert abs(np.linalg.norm(read[key]) - 1) < 1e-5


def test_a_pack_of_another_model_or_dimension_or_unreadable_is_ignored(tmp_path):
    write_pack(tmp_path, "model-a", ["x"], np.ones((1, 4), dtype=np.float32))
    assert read_pack(tmp_path, "model-a", 5) == {}
    assert read_pack(tmp_path, "model-b", 4) == {}
    pack_path(tmp_path, "model-a").write_bytes(b"not a zip")
    assert read_pack(tmp_path, "model-a", 4) == {}
    assert read_pack(tmp_path / "missing", "model-a", 4) == {}


def test_ingest_skips_the_pack_folder(tmp_path):
    (tmp_path / "Page.md").write_text("# Page\n\ntext\n", encoding="utf-8")
    (tmp_path / PACK_DIR).mkdir()
    (tmp_path / PACK_DIR / "notes.md").write_text("# Hidden\n", encoding="utf-8")
    assert [d.path for d in read_folder(tmp_path)] == ["Page.md"]


@pytest.mark.django_db
def test_a_build_takes_vectors_from_the_pack_and_embeds_only_what_changed(corpus_copy, engine_settings, tmp_path,
                                                                          counting_embedder, monkeypatch):
    engine_settings(LANCEDB_URI=str(tmp_path / "db-one"), INDEX_DIR=str(tmp_path / "index-one"))
    kb = make_kb(corpus_copy)
    _, count, _ = vectors_export(kb)  # embeds every chunk into the first data folder's cache and the pack

    # A second data folder (a fresh install: empty embedding cache), with one page edited since the pack.
    engine_settings(LANCEDB_URI=str(tmp_path / "db-two"), INDEX_DIR=str(tmp_path / "index-two"))
    from rag.pipeline import get_engine

    monkeypatch.setattr(get_engine(), "embedder", counting_embedder)
    page = corpus_copy / "PerspectiveCamera.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n相机的远裁剪面决定能看多远。\n", encoding="utf-8")
    packed = set(read_pack(corpus_copy, counting_embedder.model_id, counting_embedder.dimension))
    chunks = chunk_documents(read_folder(corpus_copy))
    changed = len({c.text_hash for c in chunks} - packed)
    changed_fields = len({c.field_hash for c in chunks} - packed)  # a field is embedded apart from its chunk

    version = index_build(kb)

    assert 1 <= changed < count
    assert (version.chunks_embedded, counting_embedder.passages_embedded) == (changed, changed + changed_fields)
    assert version.chunks_reused == version.chunk_count - changed
    hits = question_search(QuestionRequest(question="PerspectiveCamera 的 fov", kb=kb.slug,
                                           channel=Channel.CLI)).result.hits
    assert hits and hits[0].chunk.class_name == "PerspectiveCamera"


def test_the_bundled_docs_pack_covers_the_docs():
    """`make run` builds the docs from docs/.rag-vectors in seconds; after editing docs/, run
    `python manage.py rag vectors --kb docs` (the build still embeds what the pack lacks, only slower)."""
    from rag.pipeline import make_embedder

    embedder = make_embedder()
    docs = Path(settings.BASE_DIR) / "docs"
    hashes = {c.text_hash for c in chunk_documents(read_folder(docs))}
    pack = read_pack(docs, embedder.model_id, embedder.dimension)
    covered = len(hashes & pack.keys()) / len(hashes)
    assert covered >= 0.9, f"docs/{PACK_DIR} covers {covered:.0%} of the docs' chunks: run `rag vectors --kb docs`"


# -- the build in the background ---------------------------------------------------------------------


@pytest.mark.django_db
def test_questions_during_the_first_build_are_told_its_progress(corpus_copy, django_capture_on_commit_callbacks):
    kb = make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        version = index_build_queue(kb)
    assert len(queued) == 1 and version.status == Status.BUILDING

    request = QuestionRequest(question="PerspectiveCamera 的 fov", kb=kb.slug, channel=Channel.WEB)
    with pytest.raises(ServiceError) as starting:
        question_search(request)
    IndexVersion.objects.filter(pk=version.pk).update(progress_done=41, progress_total=100)
    with pytest.raises(ServiceError) as halfway:
        question_search(request)

    assert (starting.value.code, starting.value.status) == ("index_building", 503)
    assert starting.value.headers == {"Retry-After": "5"} and "starting" in starting.value.message
    assert "41%" in halfway.value.message

    queued[0]()  # the worker's task (eager in tests) builds into the queued version and activates it
    version.refresh_from_db()
    kb.refresh_from_db()
    assert version.status == Status.READY and kb.active_version == version
    assert question_search(request).result.hits


@pytest.mark.django_db
def test_a_second_queue_while_one_builds_is_refused(corpus_copy, django_capture_on_commit_callbacks):
    kb = make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False):
        index_build_queue(kb)
        with pytest.raises(ServiceError) as raised:
            index_build_queue(kb)
    assert raised.value.code == "index_build_running"


@pytest.mark.django_db
def test_the_api_answers_503_with_retry_after_while_indexing(client, corpus_copy, django_capture_on_commit_callbacks,
                                                             settings):
    settings.RAG_DEFAULT_KB = "sdk"
    kb = make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False):
        index_build_queue(kb)

    response = client.post("/api/search", {"question": "PerspectiveCamera fov", "kb": "sdk"},
                           content_type="application/json")

    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response.json()["code"] == "index_building"


@pytest.mark.django_db
def test_reindex_in_the_background_returns_at_once_and_status_shows_the_build(corpus_copy, capsys,
                                                                               django_capture_on_commit_callbacks):
    make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        call_command("rag", "reindex", "--kb", "sdk", "--background", "--json")
        first = json.loads(capsys.readouterr().out)
        call_command("rag", "reindex", "--kb", "sdk", "--background", "--if-changed", "--json")
        again = json.loads(capsys.readouterr().out)
        call_command("rag", "status", "--kb", "sdk", "--json")
        status = json.loads(capsys.readouterr().out)

    assert first["queued"] and again["version"] == first["version"] and len(queued) == 1
    building = next(k for k in status["knowledge_bases"] if k["slug"] == "sdk")["building"]
    assert building["version"] == first["version"] and "Indexing" in building["message"]


# -- warm-up -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_warm_up_loads_the_model_and_opens_every_active_version(built_kb, engine):
    from rag.pipeline import warm_up

    engine.readers.clear()
    timings = warm_up()

    assert set(timings) == {"model", "segmenter", "readers"}
    assert (built_kb.slug, built_kb.active_version.name) in engine.readers


def test_the_server_warms_up_on_a_thread_only_when_asked(settings, monkeypatch):
    from rag import pipeline

    calls = []
    monkeypatch.setattr(pipeline, "warm_up", lambda: calls.append(1) or {})
    settings.RAG_WARM_UP = False
    assert pipeline.start_warm_up() is None
    settings.RAG_WARM_UP = True
    thread = pipeline.start_warm_up()
    thread.join(5)
    assert calls == [1] and thread.daemon



@pytest.mark.django_db
def test_questions_during_the_first_build_are_recorded_not_ready_not_failed(client, corpus_copy,
                                                                           django_capture_on_commit_callbacks, settings):
    """A fresh install asked while it builds is starting, not failing: no failure for the ops site to alert on."""
    from opsboard.services import alerts_evaluate
    from rag.models import RequestRecord

    settings.RAG_ALERTS = {**settings.RAG_ALERTS, "MIN_REQUESTS": 3}

    kb = make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False):
        index_build_queue(kb)

    ids = [client.post("/api/search", {"question": f"PerspectiveCamera fov {n}", "kb": "sdk"},
                       content_type="application/json").json()["request_id"] for n in range(3)]

    records = RequestRecord.objects.filter(request_id__in=ids)
    assert {(r.outcome, r.error_code) for r in records} == {("not_ready", "index_building")}
    assert not RequestRecord.objects.filter(outcome=RequestRecord.Outcome.FAILED).exists()
    assert "failure_rate" not in {alert.rule for alert in alerts_evaluate()}


@pytest.mark.django_db
def test_replies_of_index_building_do_not_use_up_a_clients_limit(client, corpus_copy,
                                                                   django_capture_on_commit_callbacks, settings):
    from infra import limits

    limits.reset()
    settings.RAG_WEB_LIMITS = {**settings.RAG_WEB_LIMITS, "CHAT_PER_MINUTE": 1, "SEARCH_PER_MINUTE": 1}
    kb = make_kb(corpus_copy)
    with django_capture_on_commit_callbacks(execute=False) as queued:
        index_build_queue(kb)

    asked = [client.post(f"/api/{face}", {"question": "PerspectiveCamera fov", "kb": "sdk"},
                         content_type="application/json") for face in ("chat", "chat", "search", "search")]
    queued[0]()  # the build ends
    after = [client.post(f"/api/{face}", {"question": "PerspectiveCamera fov", "kb": "sdk"},
                         content_type="application/json") for face in ("chat", "search")]

    assert [(r.status_code, r.json()["code"]) for r in asked] == [(503, "index_building")] * 4
    assert [r.status_code for r in after] == [200, 200]
    limits.reset()

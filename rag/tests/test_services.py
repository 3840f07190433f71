"""Knowledge base services: ingest, build, activate and prune versions (searches read the active one)."""

from __future__ import annotations

import pytest

from conftest import local_moment
from infra.errors import ServiceError
from rag.engine.ingest import read_folder
from rag.models import ClassAlias, Document, IndexVersion, KnowledgeBase
from rag.models import Channel
from rag.services.knowledge import (
    index_activate,
    index_build,
    index_prune,
    index_unchanged_version,
    kb_ensure,
    kb_sync_documents,
)
from rag.services.questions import QuestionRequest, question_search
from rag.tests.conftest import make_kb

pytestmark = pytest.mark.django_db

Status = IndexVersion.Status


def search(**fields):
    return question_search(QuestionRequest(channel=Channel.CLI, **fields)).result


def document_rows(kb) -> dict:
    return {d.path: (d.content_hash, d.changed_at) for d in kb.documents.all()}


def row_counts() -> tuple:
    return tuple(model.objects.count() for model in (KnowledgeBase, Document, IndexVersion, ClassAlias))


def append_to(source_dir, path: str, text: str) -> None:
    page = source_dir / path
    page.write_text(page.read_text(encoding="utf-8") + text, encoding="utf-8")


def version_files_exist(engine, kb, version) -> bool:
    return engine.store.exists(kb.slug, version.name) or engine.store.version_dir(kb.slug, version.name).exists()


# -- building ----------------------------------------------------------------------------------------


def test_index_build_creates_a_ready_active_version_with_document_rows(built_kb, corpus_copy, engine):
    version = built_kb.active_version

    documents = read_folder(corpus_copy)

    assert version.status == Status.READY
    assert (version.document_count, version.dimension) == (len(documents), 384)
    assert version.model_id == engine.embedder.model_id
    assert version.built_at is not None and version.activated_at is not None
    assert engine.store.exists("sdk", version.name)
    assert sorted(built_kb.documents.values_list("path", flat=True)) == sorted(d.path for d in documents)
    assert sum(built_kb.documents.values_list("chunk_count", flat=True)) == version.chunk_count
    assert engine.reader("sdk", version.name).count == version.chunk_count
    assert version.chunks_embedded + version.chunks_reused == version.chunk_count


def test_reingesting_unchanged_files_changes_no_document_row(built_kb):
    before = document_rows(built_kb)

    second = index_build(built_kb)

    assert document_rows(built_kb) == before
    assert (second.chunks_embedded, second.chunks_reused) == (0, second.chunk_count)


def test_a_changed_file_changes_only_its_document_row(built_kb, corpus_copy):
    before = document_rows(built_kb)
    append_to(corpus_copy, "Fog.md", "\n雾不会影响透明物体之外的任何设置。\n")

    version = index_build(built_kb)

    after = document_rows(built_kb)
    assert {path for path in before if before[path] != after[path]} == {"Fog.md"}
    assert after["Fog.md"][1] > before["Fog.md"][1]
    assert version.chunks_embedded == 1


def test_a_removed_file_removes_its_document_row(built_kb, corpus_copy):
    (corpus_copy / "Clock.md").unlink()

    index_build(built_kb)

    assert not built_kb.documents.filter(path="Clock.md").exists()


def test_syncing_the_same_documents_twice_reports_no_change(built_kb, corpus_copy):
    documents = read_folder(corpus_copy)

    assert kb_sync_documents(built_kb, documents) == 0


def test_building_seven_times_keeps_the_five_newest_ready_versions(built_kb, engine):
    for _ in range(6):
        index_build(built_kb)

    versions = list(built_kb.versions.order_by("-created_at", "-id"))
    built_kb.refresh_from_db()
    assert [v.status for v in versions] == [Status.READY] * 5 + [Status.DELETED] * 2
    assert built_kb.active_version == versions[0]
    assert all(engine.store.exists("sdk", v.name) for v in versions[:5])
    assert not any(version_files_exist(engine, built_kb, v) for v in versions[5:])


def test_keep_versions_comes_from_settings(built_kb, engine_settings):
    engine_settings(KEEP_VERSIONS=2)

    index_build(built_kb)
    index_build(built_kb)

    assert list(built_kb.versions.values_list("status", flat=True)) == [Status.READY, Status.READY, Status.DELETED]


def test_pruning_never_deletes_the_active_version(built_kb, engine):
    first = built_kb.active_version
    newer = index_build(built_kb, activate=False)
    index_activate(first)

    removed = index_prune(built_kb, keep=1)

    built_kb.refresh_from_db()
    assert removed == []
    assert built_kb.active_version == first
    assert engine.store.exists("sdk", first.name) and engine.store.exists("sdk", newer.name)


def test_a_failed_build_leaves_the_active_version_active(built_kb, engine, monkeypatch):
    active = built_kb.active_version

    def build_fails(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(engine.store, "build", build_fails)

    with pytest.raises(ServiceError) as raised:
        index_build(built_kb)

    failed = built_kb.versions.exclude(pk=active.pk).get()
    built_kb.refresh_from_db()
    assert (raised.value.code, raised.value.status) == ("index_build_failed", 500)
    assert (failed.status, failed.error) == (Status.FAILED, "RuntimeError: disk full")
    assert built_kb.active_version == active
    assert search(kb="sdk", question="PerspectiveCamera 的 fov").version == active.name


def test_an_empty_source_folder_fails_the_build_and_keeps_the_active_version(built_kb, corpus_copy):
    active = built_kb.active_version
    for page in [*corpus_copy.glob("*.md"), *corpus_copy.glob("html/*")]:
        page.unlink()

    with pytest.raises(ServiceError) as raised:
        index_build(built_kb)

    built_kb.refresh_from_db()
    assert raised.value.code == "source_empty"
    assert built_kb.active_version == active
    assert list(built_kb.versions.all()) == [active]


def test_a_build_is_refused_while_another_runs(built_kb):
    IndexVersion.objects.create(kb=built_kb, name="running", model_id="m")

    with pytest.raises(ServiceError) as raised:
        index_build(built_kb)

    assert (raised.value.code, raised.value.status) == ("index_build_running", 409)


BUILD_CHECKED_AT = local_moment("2026-03-10 10:00")


@pytest.mark.time_machine(BUILD_CHECKED_AT)  # ticking from there: the builds keep their order
def test_a_build_whose_worker_died_is_marked_failed_and_blocks_nothing(built_kb):
    import datetime

    from rag.services.knowledge import STALE_BUILD_SECONDS

    dead = IndexVersion.objects.create(kb=built_kb, name="dead", model_id="m")
    silent = BUILD_CHECKED_AT - datetime.timedelta(seconds=STALE_BUILD_SECONDS + 1)
    IndexVersion.objects.filter(pk=dead.pk).update(heartbeat_at=silent)

    version = index_build(built_kb)

    dead.refresh_from_db()
    assert dead.status == IndexVersion.Status.FAILED and "abandoned" in dead.error
    assert version.status == IndexVersion.Status.READY


def test_a_search_during_a_build_uses_the_old_version(built_kb, corpus_copy):
    old = built_kb.active_version
    append_to(corpus_copy, "PerspectiveCamera.md", "\n相机的近裁剪面不要设得太小，否则会出现深度冲突。\n")
    seen = []

    def progress(done, total):
        seen.append(search(kb="sdk", question="PerspectiveCamera 的 near").version)

    new = index_build(built_kb, progress=progress)

    built_kb.refresh_from_db()
    assert seen and set(seen) == {old.name}
    assert built_kb.active_version == new != old
    assert search(kb="sdk", question="PerspectiveCamera 的 near").version == new.name


# -- unchanged sources -------------------------------------------------------------------------------


def test_index_unchanged_version_returns_the_active_version_when_nothing_changed(built_kb):
    assert index_unchanged_version(built_kb) == built_kb.active_version


def test_index_unchanged_version_is_none_after_a_file_changes(built_kb, corpus_copy):
    append_to(corpus_copy, "Texture.md", "\n补充一句。\n")

    assert index_unchanged_version(built_kb) is None


def test_index_unchanged_version_is_none_without_an_active_version(corpus_copy):
    kb = make_kb(corpus_copy)

    assert index_unchanged_version(kb) is None


# -- knowledge bases ---------------------------------------------------------------------------------


def test_kb_ensure_creates_a_knowledge_base_once(corpus_copy):
    first = kb_ensure(slug="sdk", source_dir=str(corpus_copy))

    again = kb_ensure(slug="sdk")

    assert first == again
    assert (again.source_dir, again.language) == (str(corpus_copy.resolve()), "mixed")


@pytest.mark.parametrize(
    "slug, source, code",
    [("Not A Slug", "corpus", "invalid_kb_slug"), ("", "corpus", "invalid_kb_slug"), ("new-kb", None, "kb_not_found"),
     ("new-kb", "missing", "source_not_found")],
)
def test_kb_ensure_refuses_bad_input(tmp_path, slug, source, code):
    (tmp_path / "corpus").mkdir()

    with pytest.raises(ServiceError) as raised:
        kb_ensure(slug=slug, source_dir=str(tmp_path / source) if source else None)

    assert raised.value.code == code
    assert row_counts() == (0, 0, 0, 0)


def test_the_database_holds_one_build_per_base_even_when_two_starters_pass_the_check(built_kb, monkeypatch):
    """Two processes that both find no running build at the same moment: the second insert is refused."""
    from rag.models import IndexVersion
    from rag.services import knowledge

    first = knowledge._start_version(built_kb)
    monkeypatch.setattr(knowledge, "_refuse_if_building", lambda kb: None)  # the check both passed

    with pytest.raises(ServiceError) as refused:
        knowledge._start_version(built_kb)

    assert (refused.value.code, refused.value.status) == ("index_build_running", 409)
    assert list(IndexVersion.objects.filter(kb=built_kb, status="building")) == [first]

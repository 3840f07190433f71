"""Knowledge bases and their index versions: ingest, build, validate, activate, prune; read a source page."""

from __future__ import annotations

import logging
import secrets
import time
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from rag.engine.chunk import chunk_documents
from rag.engine.ingest import IngestError, front_matter_labels, read_folder
from rag.engine.text import sha1
from rag.engine.types import SourceDocument
from rag.engine.vectorpack import read_pack, write_pack
from rag.errors import ServiceError
from rag.models import ClassAlias, Document, DocumentLabel, IndexVersion, KnowledgeBase, Label, LabelValue
from rag.pipeline import get_engine

log = logging.getLogger(__name__)

STALE_BUILD_SECONDS = 180  # a build silent this long died with its process (it beats every few seconds)
BUILDING_RETRY_AFTER = 5  # seconds a caller is asked to wait while the first index is built
HEARTBEAT_SECONDS = 5  # also how often a running build's progress is written


def kb_get(slug: str) -> KnowledgeBase:
    try:
        return KnowledgeBase.objects.select_related("active_version").get(slug=slug)
    except KnowledgeBase.DoesNotExist:
        raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404) from None


_current: dict[str, tuple[tuple, KnowledgeBase]] = {}  # slug -> (marker, row) for kb_get_current


def kb_get_current(slug: str) -> KnowledgeBase:
    """Return the knowledge base with its active version, like kb_get, for a question (read it, never change it).

    The row read for an earlier question is reused while a one-line query finds it unchanged (its id,
    update time and active version): a batch asks many questions, and the ORM's join costs more than the
    rest of the bookkeeping, while a reindex or the admin may switch the version between two of them.
    """
    kb_table, version_table = KnowledgeBase._meta.db_table, IndexVersion._meta.db_table
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT kb.id, kb.updated_at, kb.active_version_id, v.name, v.status, v.built_at "
            f"FROM {quote(kb_table)} kb LEFT JOIN {quote(version_table)} v ON v.id = kb.active_version_id "
            f"WHERE kb.slug = %s", [slug])
        marker = cursor.fetchone()
    if marker is None:
        raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404)
    marker = tuple(marker)
    cached = _current.get(slug)
    if cached is not None and cached[0] == marker:
        return cached[1]
    knowledge_base = kb_get(slug)
    _current[slug] = (marker, knowledge_base)
    return knowledge_base


def kb_ensure(*, slug: str, source_dir: str | None = None, language: str | None = None) -> KnowledgeBase:
    """Return the knowledge base, creating it (or updating its source folder) as asked."""
    from django.utils.text import slugify

    if not slug or slugify(slug) != slug:
        raise ServiceError("invalid_kb_slug", "A knowledge base slug uses lowercase letters, digits and dashes.")
    kb = KnowledgeBase.objects.filter(slug=slug).first()
    if kb is None:
        if not source_dir:
            raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist; give --source to create it.",
                               status=404)
        _check_source(source_dir)
        return KnowledgeBase.objects.create(slug=slug, name=slug, source_dir=str(Path(source_dir).resolve()),
                                            language=language or "mixed")
    changed = []
    if source_dir and str(Path(source_dir).resolve()) != kb.source_dir:
        _check_source(source_dir)
        kb.source_dir = str(Path(source_dir).resolve())
        changed.append("source_dir")
    if language and language != kb.language:
        kb.language = language
        changed.append("language")
    if changed:
        kb.save(update_fields=changed + ["updated_at"])
    return kb


def _check_source(source_dir: str) -> None:
    if not Path(source_dir).is_dir():
        raise ServiceError("source_not_found", f"Source folder {source_dir} does not exist.")


def kb_sync_documents(kb: KnowledgeBase, documents: list[SourceDocument]) -> int:
    """Record the pages of a source folder; unchanged pages are left as they are. Return how many changed.

    A page's front matter gives its `url`, its `metadata` and its front-matter labels (replaced here; labels
    given in the admin stay)."""
    now = timezone.now()
    existing = {d.path: d for d in kb.documents.prefetch_related("document_labels")}
    changed = 0
    with transaction.atomic():
        for document in documents:
            row = existing.pop(document.path, None)
            url = document.meta.get("url") if isinstance(document.meta.get("url"), str) else ""
            if row is None:
                row = Document.objects.create(kb=kb, path=document.path, title=document.title[:500],
                                              content_hash=document.content_hash, size=len(document.text),
                                              changed_at=now, url=url[:1000], metadata=document.meta)
                changed += 1
            elif row.content_hash != document.content_hash or row.title != document.title[:500]:
                row.content_hash, row.title, row.size, row.changed_at = (
                    document.content_hash, document.title[:500], len(document.text), now)
                row.url, row.metadata = url[:1000], document.meta
                row.save(update_fields=["content_hash", "title", "size", "changed_at", "url", "metadata"])
                changed += 1
            elif row.metadata != document.meta:  # recorded before front matter was read
                row.url, row.metadata = url[:1000], document.meta
                row.save(update_fields=["url", "metadata"])
            _sync_front_matter_labels(row, front_matter_labels(document.meta))
        if existing:
            Document.objects.filter(pk__in=[d.pk for d in existing.values()]).delete()
            changed += len(existing)
    return changed


def _sync_front_matter_labels(document: Document, pairs: list[tuple[str, str]]) -> None:
    """Make the document's front-matter labels exactly `pairs`, creating labels and values as needed."""
    wanted = set()
    for name, value in pairs:
        label, _ = Label.objects.get_or_create(name=name)
        wanted.add(LabelValue.objects.get_or_create(label=label, value=value)[0].pk)
    rows = {row.value_id: row for row in document.document_labels.all()}
    stale = [row.pk for value_id, row in rows.items() if row.from_source and value_id not in wanted]
    if stale:
        DocumentLabel.objects.filter(pk__in=stale).delete()
    for value_id in wanted - set(rows):
        DocumentLabel.objects.create(document=document, value_id=value_id, from_source=True)


def corpus_hash(documents: list[SourceDocument]) -> str:
    return sha1("\n".join(f"{d.path}:{d.content_hash}" for d in documents))


def index_unchanged_version(kb: KnowledgeBase) -> IndexVersion | None:
    """Return the active version when the source folder and embedding model are exactly as it was built."""
    active = kb.active_version
    store = get_engine().store
    if active is None or active.model_id != get_engine().embedder.model_id or not store.exists(kb.slug, active.name):
        return None
    try:
        documents = read_folder(Path(kb.source_dir))
    except IngestError:
        return None
    return active if corpus_hash(documents) == active.corpus_hash else None


def _new_version_name() -> str:
    return timezone.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def index_build_queue(kb: KnowledgeBase) -> IndexVersion:
    """Start a build in the background (the Celery worker runs it) and return its version at once.

    The version exists from now on with status "building", so until it is active every question to a knowledge
    base without an index gets `index_building` with its progress, not "no index". One build per base at a time.
    """
    from rag.tasks import index_build_task

    with transaction.atomic():
        KnowledgeBase.objects.select_for_update().filter(pk=kb.pk).first()
        version = _start_version(kb)
    transaction.on_commit(lambda: index_build_task.delay(kb.pk, version.pk))
    return version


def _refuse_if_building(kb: KnowledgeBase) -> None:
    """One build per knowledge base: builds whose worker died are failed first, a live one refuses."""
    _fail_abandoned_builds(kb)
    if kb.versions.filter(status=IndexVersion.Status.BUILDING).exists():
        raise ServiceError("index_build_running", f"A build of {kb.slug} is already running.", status=409)


def _start_version(kb: KnowledgeBase) -> IndexVersion:
    """A new "building" version; the database holds the one-build-per-base rule (index_version_one_build), so a
    second process that passed the check at the same moment is refused by the insert, not let through."""
    _refuse_if_building(kb)
    try:
        with transaction.atomic():
            return IndexVersion.objects.create(kb=kb, name=_new_version_name(),
                                               model_id=get_engine().embedder.model_id)
    except IntegrityError:
        raise ServiceError("index_build_running", f"A build of {kb.slug} is already running.", status=409) from None


def index_build(kb: KnowledgeBase, *, progress=None, activate: bool = True,
                version: IndexVersion | None = None) -> IndexVersion:
    """Ingest the source folder, build a new version of both indexes, validate it, then switch to it.

    `version` is one that index_build_queue created for this build; without it a new one is started here.
    A failed build is recorded as failed and leaves the active version untouched.
    """
    started = time.perf_counter()
    if version is None:
        _refuse_if_building(kb)
    elif version.status != IndexVersion.Status.BUILDING or version.kb_id != kb.pk:
        raise ServiceError("version_not_building", f"Version {version.name} is {version.status}.", status=409)
    try:
        documents = read_folder(Path(kb.source_dir))
        if not documents:
            raise ServiceError("source_empty", f"{kb.source_dir} holds no Markdown or HTML pages.")
    except (IngestError, ServiceError) as exc:
        if version is not None:
            _fail_version(version, str(exc))
        if isinstance(exc, ServiceError):
            raise
        raise ServiceError("source_not_found", str(exc)) from exc
    if version is None:
        version = _start_version(kb)
    kb_sync_documents(kb, documents)
    engine = get_engine()
    version.document_count = len(documents)
    version.corpus_hash = corpus_hash(documents)
    version.document_hashes = {d.path: d.content_hash for d in documents}
    version.save(update_fields=["document_count", "corpus_hash", "document_hashes"])
    try:
        chunks = chunk_documents(documents)
        counts: dict[str, int] = {}
        for chunk in chunks:
            counts[chunk.source] = counts.get(chunk.source, 0) + 1
        prebuilt = read_pack(Path(kb.source_dir), engine.embedder.model_id, engine.embedder.dimension)
        report = engine.store.build(kb.slug, version.name, chunks, engine.embedder,
                                    progress=_with_heartbeat(version, progress), prebuilt=prebuilt)
    except Exception as exc:  # noqa: BLE001 - any failure (IndexError_ or other) must leave the active version as it was
        log.exception("index build of %s failed", kb.slug)
        _fail_version(version, f"{type(exc).__name__}: {exc}")
        raise ServiceError("index_build_failed", f"Building {kb.slug} failed: {exc}", status=500) from exc

    version.status = IndexVersion.Status.READY
    version.dimension = report.dimension
    version.chunk_count = report.chunk_count
    version.chunks_embedded = report.embedded
    version.chunks_reused = report.reused
    version.timings = {**report.timings_s, "service_total": round(time.perf_counter() - started, 3)}
    version.built_at = timezone.now()
    version.save()
    for document in kb.documents.all():
        if document.chunk_count != counts.get(document.path, 0):
            document.chunk_count = counts.get(document.path, 0)
            document.save(update_fields=["chunk_count"])
    if activate:
        index_activate(version)
    return version


def _fail_version(version: IndexVersion, error: str) -> None:
    version.status = IndexVersion.Status.FAILED
    version.error = error[:2000]
    version.save(update_fields=["status", "error"])


def index_building(kb: KnowledgeBase) -> IndexVersion | None:
    """The build of this knowledge base that is running now (still beating), if any."""
    cutoff = timezone.now() - timezone.timedelta(seconds=STALE_BUILD_SECONDS)
    for version in kb.versions.filter(status=IndexVersion.Status.BUILDING).order_by("-created_at", "-id"):
        if (version.heartbeat_at or version.created_at) >= cutoff:
            return version
    return None


def building_message(kb: KnowledgeBase, version: IndexVersion) -> str:
    """What a question to a knowledge base still being indexed for the first time is told."""
    if version.progress_total:
        percent = min(99, int(version.progress_done * 100 / version.progress_total))
        done = f": {percent}% ({version.progress_done} of {version.progress_total} passages embedded)"
    else:
        done = " (starting)" if not version.heartbeat_at else ": almost done"
    return f"Indexing the {kb.name or kb.slug} knowledge base{done}. Ask again in a few seconds."


def vectors_export(kb: KnowledgeBase, *, progress=None) -> tuple[Path, int, int]:
    """Write the vector pack of a knowledge base's source folder (see rag.engine.vectorpack) for the
    embedding model in use: every chunk of the current sources, from the cache or embedded now.
    Returns the file, the number of vectors and how many had to be embedded."""
    try:
        documents = read_folder(Path(kb.source_dir))
    except IngestError as exc:
        raise ServiceError("source_not_found", str(exc)) from exc
    if not documents:
        raise ServiceError("source_empty", f"{kb.source_dir} holds no Markdown or HTML pages.")
    engine = get_engine()
    chunks = chunk_documents(documents)
    prebuilt = read_pack(Path(kb.source_dir), engine.embedder.model_id, engine.embedder.dimension)
    vectors, embedded, _, _ = engine.store.embed_chunks(chunks, engine.embedder, progress=progress, prebuilt=prebuilt)
    unique: dict[str, int] = {}
    for i, chunk in enumerate(chunks):
        unique.setdefault(chunk.text_hash, i)
    path = write_pack(Path(kb.source_dir), engine.embedder.model_id, list(unique), vectors[list(unique.values())])
    return path, len(unique), embedded


def _fail_abandoned_builds(kb: KnowledgeBase) -> None:
    """Mark builds that stopped beating (their worker died) as failed, so they block nothing."""
    cutoff = timezone.now() - timezone.timedelta(seconds=STALE_BUILD_SECONDS)
    for version in kb.versions.filter(status=IndexVersion.Status.BUILDING):
        if (version.heartbeat_at or version.created_at) < cutoff:
            version.status = IndexVersion.Status.FAILED
            version.error = "abandoned: the build stopped reporting progress (its process ended)"
            version.save(update_fields=["status", "error"])
            get_engine().store.delete(kb.slug, version.name)


def _with_heartbeat(version: IndexVersion, progress):
    """Wrap a progress callback so the running build records a heartbeat every few seconds."""
    last = [0.0]

    def beat(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= HEARTBEAT_SECONDS or done >= total:
            last[0] = now
            IndexVersion.objects.filter(pk=version.pk).update(heartbeat_at=timezone.now(), progress_done=done,
                                                              progress_total=total)
        if progress:
            progress(done, total)

    return beat


def index_activate(version: IndexVersion) -> None:
    """Point the knowledge base at a ready version in one transaction, then prune old versions."""
    if version.status != IndexVersion.Status.READY:
        raise ServiceError("version_not_ready", f"Version {version.name} is {version.status}.", status=409)
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=version.kb_id)
        kb.active_version = version
        kb.save(update_fields=["active_version", "updated_at"])
        IndexVersion.objects.filter(pk=version.pk).update(activated_at=timezone.now())
    index_prune(kb)


def index_prune(kb: KnowledgeBase, *, keep: int | None = None) -> list[str]:
    """Delete all but the newest `keep` ready versions (never the active one). Return the names removed."""
    keep = keep or settings.RAG_ENGINE["KEEP_VERSIONS"]
    kb.refresh_from_db(fields=["active_version"])
    ready = list(kb.versions.filter(status=IndexVersion.Status.READY).order_by("-created_at", "-id"))
    removed = []
    engine = get_engine()
    for version in ready[keep:]:
        if version.pk == kb.active_version_id:
            continue
        engine.store.delete(kb.slug, version.name)
        engine.forget(kb.slug, version.name)
        version.status = IndexVersion.Status.DELETED
        version.save(update_fields=["status"])
        removed.append(version.name)
    for version in kb.versions.filter(status=IndexVersion.Status.FAILED):
        engine.store.delete(kb.slug, version.name)  # leftovers of a failed build, if any
    return removed


def aliases_for(kb: KnowledgeBase) -> dict[str, str]:
    """The alias table for a knowledge base: the global entries, overridden by the base's own."""
    # Read on every question, so in plain SQL: the ORM would cost more than the query.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT alias, class_name, kb_id FROM {connection.ops.quote_name(ClassAlias._meta.db_table)} "
                       f"WHERE kb_id IS NULL OR kb_id = %s ORDER BY alias", [kb.pk])
        rows = cursor.fetchall()
    aliases = {alias: name for alias, name, kb_id in rows if kb_id is None}
    aliases.update({alias: name for alias, name, kb_id in rows if kb_id is not None})
    return aliases


def read_source(*, kb: str, source: str) -> str:
    """Return a page's Markdown; refuse anything outside the knowledge base's folder."""
    knowledge_base = kb_get(kb)
    root = Path(knowledge_base.source_dir).resolve()
    if not isinstance(source, str) or not source or "\x00" in source:
        raise ServiceError("invalid_source", "Give the source path of a page, relative to the knowledge base.")
    candidate = Path(source)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise ServiceError("source_outside_kb", "The path leads outside the knowledge base.", status=403)
    target = (root / candidate).resolve()
    if not target.is_relative_to(root):
        raise ServiceError("source_outside_kb", "The path leads outside the knowledge base.", status=403)
    if not target.is_file():
        raise ServiceError("source_not_found", f"{source} is not a page of {kb}.", status=404)
    return target.read_text(encoding="utf-8", errors="replace")


def kb_source_hashes(kb: KnowledgeBase) -> dict[str, str]:
    """The content hash of every page in a knowledge base's source folder now ({} when the folder is gone)."""
    try:
        return {d.path: d.content_hash for d in read_folder(Path(kb.source_dir))}
    except (IngestError, OSError):
        return {}


def index_version_note(version: IndexVersion, note: str) -> None:
    """Say on a ready version why it is not active (a release gate that failed), for the admin and the CLI."""
    IndexVersion.objects.filter(pk=version.pk).update(error=note[:2000])
    version.refresh_from_db(fields=["error"])

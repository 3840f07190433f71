"""Knowledge bases and their index versions: ingest, build, validate, activate, prune; read a source page."""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from pathlib import Path
from urllib.parse import quote

import numpy as np
from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from infra.errors import ServiceError
from infra.queue import enqueue
from rag.engine.chunk import chunk_documents
from rag.engine.index import IndexError_
from rag.engine.sdk import api_catalog
from rag.engine.ingest import (HTML_SUFFIXES, IngestError, folder_hashes, front_matter_labels, read_document,
                               read_folder, skipped_pages, storable)
from rag.engine.text import sha1
from rag.engine.types import SourceDocument
from rag.engine.vectorpack import read_pack, write_pack
from rag.models import (ClassAlias, Document, DocumentLabel, EverydayWord, IndexVersion, KnowledgeBase, Label,
                        LabelValue)
from rag.pipeline import REOPEN_AFTER_SECONDS, get_engine
from rag.services.sources import is_remote, last_crawl, source_check, source_folder, source_kind, sync
from rag.shapes import ANCHOR_SAFE

log = logging.getLogger(__name__)

STALE_BUILD_SECONDS = 180  # a build silent this long died with its process (it beats every few seconds)
BUILDING_RETRY_AFTER = 5  # seconds a caller is asked to wait while the first index is built
HEARTBEAT_SECONDS = 5  # also how often a running build's progress is written
FALLBACK_TRIES = 3  # earlier versions tried while the active one does not open
VERSION_IN_USE_SECONDS = 600  # a version asked for by name this recently (a replay, an eval run) is kept
USED_AT_PRECISION_SECONDS = 60


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


def kb_ensure(*, slug: str, source_dir: str | None = None, language: str | None = None,
              sdk: KnowledgeBase | None = None, sdk_version: str = "", create_empty: bool = False) -> KnowledgeBase:
    """Return the knowledge base, creating it (or updating its source folder) as asked.

    `sdk` and `sdk_version` create one version of an SDK (`three@2.0`, rag.services.sdk); `create_empty` an SDK
    that has no pages of its own, only versions."""
    from django.utils.text import slugify

    own_slug = slug.partition("@")[0] if sdk is not None else slug
    if not own_slug or slugify(own_slug) != own_slug:
        raise ServiceError("invalid_kb_slug", "A knowledge base slug uses lowercase letters, digits and dashes.")
    kb = KnowledgeBase.objects.filter(slug=slug).first()
    if kb is None and create_empty and not source_dir:
        return KnowledgeBase.objects.create(slug=slug, name=slug, language=language or "mixed", source_dir="")
    source_url = site = ""
    if is_remote(source_dir):  # a git repository or a website: its copy in the data folder is the source folder
        parsed = source_check(source_dir)
        source_url, source_dir = parsed.spec, str(source_folder(slug, parsed))
        # where its pages are shown (the site, or the repository's web view): citations link there
        site = parsed.url if parsed.kind == "website" else parsed.web_view
    if kb is None:
        if not source_dir:
            raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist; give --source to create it.",
                               status=404)
        return KnowledgeBase.objects.create(slug=slug, name=slug, language=language or "mixed", source_url=source_url,
                                            source_dir=source_dir if source_url else kb_source_check(source_dir),
                                            base_url=site, sdk=sdk, sdk_version=sdk_version)
    changed = []
    if source_url and source_url != kb.source_url:
        kb.source_url, kb.source_dir, kb.source_revision = source_url, source_dir, ""
        changed += ["source_url", "source_dir", "source_revision"]
        if site:
            kb.base_url = site
            changed.append("base_url")
    elif source_dir and not source_url and (kb.source_url or str(Path(source_dir).resolve()) != kb.source_dir):
        kb.source_dir, kb.source_url, kb.source_revision = kb_source_check(source_dir), "", ""
        changed += ["source_dir", "source_url", "source_revision"]
    if language and language != kb.language:
        kb.language = language
        changed.append("language")
    if changed:
        kb.save(update_fields=changed + ["updated_at"])
    return kb


def kb_source_check(source_dir: str) -> str:
    """Return a source folder as stored (resolved, symbolic links followed); raise source_not_found when it is not
    a folder, or source_not_allowed when it lies outside every RAG_SOURCE_ROOTS folder."""
    if not Path(source_dir).is_dir():
        raise ServiceError("source_not_found", f"Source folder {source_dir} does not exist.")
    return str(_allowed_folder(source_dir))


def _allowed_folder(source_dir: str) -> Path:
    """The resolved folder, when it lies inside a source root; else raise source_not_allowed."""
    folder = Path(source_dir).resolve()
    roots = list(dict.fromkeys(Path(root).resolve() for root in settings.RAG_SOURCE_ROOTS if "://" not in root))
    if not any(folder.is_relative_to(root) for root in roots):
        raise ServiceError("source_not_allowed", f"Source folder {folder} is outside the folders knowledge bases may "
                                                 f"read (RAG_SOURCE_ROOTS: {', '.join(map(str, roots))}).",
                           status=403)
    return folder


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
    return hashes_digest({d.path: d.content_hash for d in documents})


def hashes_digest(hashes: dict[str, str]) -> str:
    """One hash of every page's content hash, in path order (what corpus_hash says of the documents)."""
    return sha1("\n".join(f"{path}:{content_hash}" for path, content_hash in hashes.items()))


def index_unchanged_version(kb: KnowledgeBase, *, sync_progress=None) -> IndexVersion | None:
    """Return the active version when the source folder and embedding model are exactly as it was built. A git or
    website source is synced first, so a build that follows can skip its own sync (index_build(sync=False))."""
    if kb.source_url:
        source_sync(kb, progress=sync_progress)
    active = kb.active_version
    store = get_engine().store
    if active is None or active.model_id != get_engine().embedder.model_id or not store.exists(kb.slug, active.name):
        return None
    try:
        hashes = folder_hashes(_allowed_folder(kb.source_dir))  # the pages' bytes decide; no page is read
    except IngestError:
        return None
    return active if hashes_digest(hashes) == active.corpus_hash else None


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
        version = _start_version(kb)  # the worker that picks it up claims it (index_build)
    transaction.on_commit(lambda: enqueue(index_build_task, kb.pk, version.pk, on_unavailable=lambda reason: (
        IndexVersion.objects.filter(pk=version.pk, status=IndexVersion.Status.BUILDING).update(
            status=IndexVersion.Status.FAILED, error=reason))))
    return version


def _refuse_if_building(kb: KnowledgeBase) -> None:
    """One build per knowledge base: builds whose worker died are failed first, a live one refuses."""
    _fail_abandoned_builds(kb)
    if kb.versions.filter(status=IndexVersion.Status.BUILDING).exists():
        raise ServiceError("index_build_running", f"A build of {kb.slug} is already running.", status=409)


def _start_version(kb: KnowledgeBase, *, builder: str = "") -> IndexVersion:
    """A new "building" version; the database holds the one-build-per-base rule (index_version_one_build), so a
    second process that passed the check at the same moment is refused by the insert, not let through."""
    _refuse_if_building(kb)
    try:
        with transaction.atomic():
            return IndexVersion.objects.create(kb=kb, name=_new_version_name(), builder=builder,
                                               model_id=get_engine().embedder.model_id)
    except IntegrityError:
        raise ServiceError("index_build_running", f"A build of {kb.slug} is already running.", status=409) from None


def index_build(kb: KnowledgeBase, *, progress=None, activate: bool = True,
                version: IndexVersion | None = None, sync_progress=None, sync: bool = True) -> IndexVersion:
    """Sync a git or website source (unless `sync` is False: index_unchanged_version just did), ingest the source
    folder, build a new version of both indexes, validate it, then switch to it.

    `version` is one that index_build_queue created for this build; without it a new one is started here.
    A failed build is recorded as failed and leaves the active version untouched.
    """
    started = time.perf_counter()
    if version is None:
        _refuse_if_building(kb)
    elif version.status != IndexVersion.Status.BUILDING or version.kb_id != kb.pk:
        raise ServiceError("version_not_building", f"Version {version.name} is {version.status}.", status=409)
    else:  # claim the queued version: a build whose process is gone is known at once (_builder_gone)
        version.builder = this_builder()
        version.save(update_fields=["builder"])
    if not kb.source_dir:
        raise ServiceError("source_not_found", f"{kb.slug} has no pages of its own: it holds SDK versions; build one "
                                               f"with `rag reindex --kb {kb.slug} --sdk-version V`.")
    try:
        revision = source_sync(kb, progress=sync_progress) if kb.source_url and sync else kb.source_revision
        documents = read_folder(_allowed_folder(kb.source_dir))  # a folder changed in the database is checked too
        if not documents:
            raise ServiceError("source_empty", f"{kb.source_dir} holds no Markdown or HTML pages.")
    except (IngestError, ServiceError) as exc:
        if version is not None:
            _fail_version(version, str(exc))
        if isinstance(exc, ServiceError):
            raise
        raise ServiceError("source_not_found", str(exc)) from exc
    if version is None:
        version = _start_version(kb, builder=this_builder())
    kb_sync_documents(kb, documents)
    engine = get_engine()
    version.document_count = len(documents)
    version.corpus_hash = corpus_hash(documents)
    version.document_hashes = {d.path: d.content_hash for d in documents}
    version.source_revision = revision
    version.page_changes = page_changes(kb.active_version.document_hashes if kb.active_version else {},
                                        version.document_hashes)
    version.save(update_fields=["document_count", "corpus_hash", "document_hashes", "source_revision", "page_changes"])
    chunks = chunk_documents(documents)  # what will be indexed is known before anything is embedded
    counts: dict[str, int] = {}
    for chunk in chunks:
        counts[chunk.source] = counts.get(chunk.source, 0) + 1
    version.pages_skipped = pages_skipped(documents, counts)
    version.api_catalog = api_catalog(documents)  # what an SDK version is compared with its neighbours by
    version.save(update_fields=["pages_skipped", "api_catalog"])
    if not chunks:
        reasons = sorted({page["reason"] for page in version.pages_skipped})
        message = (f"None of the {len(documents)} pages of {kb.source_dir} yields text to index "
                   f"({'; '.join(reasons)}).")
        _fail_version(version, message)
        raise ServiceError("source_empty", message)
    try:
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


def source_sync(kb: KnowledgeBase, *, progress=None) -> str:
    """Bring a git or website source's copy up to date; record and return its revision. `progress(done, known)`
    follows a website's crawl."""
    revision = sync(kb.slug, source_check(kb.source_url), progress=progress)
    kb.source_revision, kb.source_synced_at = revision, timezone.now()
    kb.save(update_fields=["source_revision", "source_synced_at", "updated_at"])
    return revision


def sources_sync_due(now=None) -> list[str]:
    """Sync every knowledge base whose `sync_interval_minutes` has passed since its last scheduled sync: fetch its
    source (git, website or folder) and build a new version only when its pages or the model changed. A failure
    (network, credentials, a site gone, a page budget) keeps the active version and is kept in `sync_error`, which
    the ops site's `source_sync_failed` alert reads; the next good sync clears it. Returns the slugs synced."""
    now = now or timezone.now()
    synced = []
    for kb in KnowledgeBase.objects.filter(sync_interval_minutes__gt=0).order_by("slug"):
        if kb.sync_checked_at and kb.sync_checked_at + timezone.timedelta(minutes=kb.sync_interval_minutes) > now:
            continue
        kb.sync_checked_at = now
        kb.save(update_fields=["sync_checked_at"])
        try:
            if index_building(kb) is None and index_unchanged_version(kb) is None:
                index_build(kb, sync=False)  # index_unchanged_version synced the source
            error = ""
        except ServiceError as exc:
            error = f"{exc.code}: {exc.message}"[:500]
            log.warning("scheduled sync of %s failed: %s", kb.slug, error)
        KnowledgeBase.objects.filter(pk=kb.pk).update(sync_error=error)
        synced.append(kb.slug)
    return synced


def source_as_dict(kb: KnowledgeBase) -> dict:
    """Where a knowledge base's pages come from, as `rag status --json` and `rag reindex --json` show it."""
    if kb.source_url:
        website = source_kind(kb.source_url) == "website"
        shown = {"kind": source_kind(kb.source_url), "location": kb.source_url, "folder": kb.source_dir,
                 "revision": kb.source_revision,
                 "synced_at": kb.source_synced_at.isoformat() if kb.source_synced_at else None}
        return {**shown, "crawl": last_crawl(kb.slug)} if website else shown
    return {"kind": "folder", "location": kb.source_dir, "folder": kb.source_dir, "revision": "", "synced_at": None}


PAGE_CHANGES = ("added", "changed", "removed", "renamed", "unchanged")


def page_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, int]:
    """How the pages changed between two builds, from their paths and content hashes: a page whose path is new but
    whose bytes are those of a page gone from its old path was renamed."""
    gone = {before[path] for path in before.keys() - after.keys()}
    new = [path for path in after.keys() - before.keys()]
    renamed = sum(1 for path in new if after[path] in gone)
    same = before.keys() & after.keys()
    return {"added": len(new) - renamed, "changed": sum(1 for p in same if before[p] != after[p]),
            "removed": len(before.keys() - after.keys()) - renamed, "renamed": renamed,
            "unchanged": sum(1 for p in same if before[p] == after[p])}


def pages_skipped(documents: list[SourceDocument], counts: dict[str, int]) -> list[dict]:
    """The pages a build leaves out, each with its reader's reason ({"path", "reason"})."""
    skipped = {page["path"]: page["reason"] for page in skipped_pages(documents)}
    return [{"path": d.path, "reason": skipped.get(d.path) or "no text"} for d in documents if not counts.get(d.path)]


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
        documents = read_folder(_allowed_folder(kb.source_dir))
    except IngestError as exc:
        raise ServiceError("source_not_found", str(exc)) from exc
    if not documents:
        raise ServiceError("source_empty", f"{kb.source_dir} holds no Markdown or HTML pages.")
    engine = get_engine()
    chunks = chunk_documents(documents)
    prebuilt = read_pack(Path(kb.source_dir), engine.embedder.model_id, engine.embedder.dimension)
    found = engine.store.embed_chunks(chunks, engine.embedder, progress=progress, prebuilt=prebuilt)
    vectors = np.concatenate([found.vectors, found.field_vectors])  # in the order of found.hashes
    unique: dict[str, int] = {}
    for i, text_hash in enumerate(found.hashes):
        unique.setdefault(text_hash, i)
    path = write_pack(Path(kb.source_dir), engine.embedder.model_id, list(unique), vectors[list(unique.values())])
    return path, len(unique), found.embedded + found.fields_embedded


def this_builder() -> str:
    """Who runs a build: this machine, its process namespace and this process (`host:pid namespace:pid`)."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # two containers may share a host name, never this
    except OSError:
        namespace = ""
    return f"{socket.gethostname()}:{namespace}:{os.getpid()}"


def _builder_gone(builder: str) -> bool:
    """A build started on this machine, in this process namespace, whose process no longer exists (killed or
    crashed): it will never beat again, so there is no need to wait STALE_BUILD_SECONDS to know it."""
    place, _, pid = builder.rpartition(":")
    if not pid.isdigit() or place != this_builder().rpartition(":")[0]:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists but is not ours to signal
        return False
    return False


def _fail_abandoned_builds(kb: KnowledgeBase) -> None:
    """Mark builds whose process died as failed (they stopped beating, or their process on this machine is
    gone), and remove what they had written, so they block nothing."""
    cutoff = timezone.now() - timezone.timedelta(seconds=STALE_BUILD_SECONDS)
    for version in kb.versions.filter(status=IndexVersion.Status.BUILDING):
        if (version.heartbeat_at or version.created_at) < cutoff or _builder_gone(version.builder):
            version.status = IndexVersion.Status.FAILED
            version.error = "abandoned: the build's process ended (it stopped reporting progress)"
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


def index_unavailable(kb: KnowledgeBase) -> ServiceError:
    """What a question is told when no version of its knowledge base opens (a missing or corrupt index)."""
    return ServiceError("index_unavailable", f"The index of {kb.name or kb.slug} cannot be read right now; "
                                             "ask again in a moment.", status=503,
                        headers={"Retry-After": str(REOPEN_AFTER_SECONDS)})


def index_fallback(kb: KnowledgeBase, error: Exception) -> IndexVersion:
    """The version to serve while the active one does not open: the ready version activated most recently
    before it that opens (at most FALLBACK_TRIES are tried). Raise index_unavailable when none does."""
    engine = get_engine()
    earlier = (kb.versions.filter(status=IndexVersion.Status.READY, activated_at__isnull=False)
               .exclude(pk=kb.active_version_id).order_by("-activated_at", "-id"))
    for version in earlier[:FALLBACK_TRIES]:
        try:
            engine.reader(kb.slug, version.name)
        except IndexError_:
            continue
        log.warning("the active version of %s does not open (%s); serving %s", kb.slug, error, version.name)
        return version
    log.error("no version of %s opens (the active one: %s)", kb.slug, error)
    raise index_unavailable(kb)


def index_version_mark_used(version: IndexVersion) -> None:
    """Note that a version was just asked for by name (an eval question, a replay), so pruning keeps it a while;
    written at most every USED_AT_PRECISION_SECONDS."""
    now = timezone.now()
    if version.used_at is None or (now - version.used_at).total_seconds() >= USED_AT_PRECISION_SECONDS:
        IndexVersion.objects.filter(pk=version.pk).update(used_at=now)
        version.used_at = now


def _failed_its_gate(version: IndexVersion) -> bool:
    """A candidate a release gate refused: never activated, with the gate's note (index_version_note)."""
    return version.activated_at is None and bool(version.error)


def index_prune(kb: KnowledgeBase, *, keep: int | None = None) -> list[str]:
    """Delete ready versions beyond the newest `keep` good ones; return the names removed.

    A candidate that failed its gate takes no place among them (it stays only while among the newest `keep`
    versions). Never deleted: the active version, the one activated before it (the last known good), every
    version a holder names (the eval runs queued or running, rag.services.retention) and one asked for by name
    in the last VERSION_IN_USE_SECONDS (a replay, an eval question)."""
    from rag.services.retention import versions_held

    keep = keep or settings.RAG_ENGINE["KEEP_VERSIONS"]
    kb.refresh_from_db(fields=["active_version"])
    ready = list(kb.versions.filter(status=IndexVersion.Status.READY).order_by("-created_at", "-id"))
    good = [v for v in ready if not _failed_its_gate(v)]
    earlier = [v for v in ready if v.activated_at is not None and v.pk != kb.active_version_id]
    previous = max(earlier, key=lambda v: (v.activated_at, v.pk), default=None)
    held = versions_held(kb.slug)
    recently = timezone.now() - timezone.timedelta(seconds=VERSION_IN_USE_SECONDS)
    kept = {v.pk for v in good[:keep] + ready[:keep]} | {kb.active_version_id, previous and previous.pk}
    removed = []
    engine = get_engine()
    for version in ready:
        if version.pk in kept or version.name in held or (version.used_at and version.used_at >= recently):
            continue
        engine.store.delete(kb.slug, version.name)
        engine.forget(kb.slug, version.name)
        version.status = IndexVersion.Status.DELETED
        version.save(update_fields=["status"])
        removed.append(version.name)
    for version in kb.versions.filter(status=IndexVersion.Status.FAILED):
        engine.store.delete(kb.slug, version.name)  # leftovers of a failed build, if any
    return removed


def planning_tables(kb: KnowledgeBase) -> tuple[dict[str, str], dict[str, str]]:
    """The tables the planner reads for a knowledge base: aliases (alias -> class name) and everyday words
    (phrase -> the docs' terms), each with the global entries (blank kb) overridden by the base's own."""
    # Read on every question, so in plain SQL and one round trip: the ORM would cost more than the query.
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 'alias', alias, class_name, kb_id FROM {quote(ClassAlias._meta.db_table)} "
                       f"WHERE kb_id IS NULL OR kb_id = %s UNION ALL "
                       f"SELECT 'word', phrase, terms, kb_id FROM {quote(EverydayWord._meta.db_table)} "
                       f"WHERE kb_id IS NULL OR kb_id = %s", [kb.pk, kb.pk])
        rows = cursor.fetchall()
    tables: dict[str, dict[str, str]] = {"alias": {}, "word": {}}
    for own in (False, True):  # the base's own entries last, so they win
        for table, key, value, kb_id in rows:
            if (kb_id is not None) == own:
                tables[table][key] = value
    return tables["alias"], tables["word"]


def kb_searcher(kb: KnowledgeBase, version: str):
    """The engine's searcher of a version of this base, planning with the base's alias and everyday-words tables
    as they are now (built once per version and tables: rag.pipeline.Engine.searcher)."""
    return get_engine().searcher(kb.slug, version, *planning_tables(kb))


def read_source(*, kb: str, source: str) -> str:
    """Return a page's Markdown as its reader reads it (an HTML page without its navigation and page chrome), or
    one section of it for `page.html#anchor` (a result's or citation's `link`); refuse anything outside the
    knowledge base's folder."""
    knowledge_base = kb_get(kb)
    root = _allowed_folder(knowledge_base.source_dir)
    if not isinstance(source, str) or not source or "\x00" in source:
        raise ServiceError("invalid_source", "Give the source path of a page, relative to the knowledge base.")
    source, _, anchor = source.partition("#")
    if not source:
        raise ServiceError("invalid_source", "Give the source path of a page, relative to the knowledge base.")
    candidate = Path(source)
    if candidate.is_absolute() or ".." in candidate.parts:
        raise ServiceError("source_outside_kb", "The path leads outside the knowledge base.", status=403)
    target = (root / candidate).resolve()
    if not target.is_relative_to(root):
        raise ServiceError("source_outside_kb", "The path leads outside the knowledge base.", status=403)
    if not target.is_file():
        raise ServiceError("source_not_found", f"{source} is not a page of {kb}.", status=404)
    raw = storable(target.read_text(encoding="utf-8", errors="replace"))
    if target.suffix.lower() not in HTML_SUFFIXES and not anchor:
        return raw
    document = read_document(source, raw, suffix=target.suffix.lower())
    if not anchor:
        return document.text
    sections = [s.markdown for s in document.page.sections if anchor in (s.anchor, quote(s.anchor, safe=ANCHOR_SAFE))]
    if not sections:
        raise ServiceError("section_not_found", f"{source} has no section #{anchor}.", status=404)
    return "\n\n".join(sections)


def kb_source_hashes(kb: KnowledgeBase) -> dict[str, str]:
    """The content hash of every page in a knowledge base's source folder now ({} when the folder is gone)."""
    try:
        return folder_hashes(_allowed_folder(kb.source_dir))
    except (IngestError, OSError, ServiceError):  # gone, or outside RAG_SOURCE_ROOTS
        return {}


def index_version_note(version: IndexVersion, note: str) -> None:
    """Say on a ready version why it is not active (a release gate that failed), for the admin and the CLI."""
    IndexVersion.objects.filter(pk=version.pk).update(error=note[:2000])
    version.refresh_from_db(fields=["error"])

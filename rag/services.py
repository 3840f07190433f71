"""Writes and engine calls for knowledge bases: ingest, build and activate versions, search, read."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rag.engine.chunk import chunk_documents
from rag.engine.generate import Answer, answer_without_model
from rag.engine.ingest import IngestError, read_folder
from rag.engine.search import MODES
from rag.engine.text import sha1
from rag.engine.types import SearchResult, SourceDocument
from rag.errors import ServiceError
from rag.models import ClassAlias, Document, IndexVersion, KnowledgeBase, RequestRecord
from rag.pipeline import get_engine

log = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 2000
MAX_TOP_K = 50
STALE_BUILD_SECONDS = 600  # a build silent this long died with its process (it beats every few seconds)
HEARTBEAT_SECONDS = 15


def kb_get(slug: str) -> KnowledgeBase:
    try:
        return KnowledgeBase.objects.select_related("active_version").get(slug=slug)
    except KnowledgeBase.DoesNotExist:
        raise ServiceError("kb_not_found", f"Knowledge base {slug!r} does not exist.", status=404) from None


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
    """Record the pages of a source folder; unchanged pages are left as they are. Return how many changed."""
    now = timezone.now()
    existing = {d.path: d for d in kb.documents.all()}
    changed = 0
    with transaction.atomic():
        for document in documents:
            row = existing.pop(document.path, None)
            if row is None:
                Document.objects.create(kb=kb, path=document.path, title=document.title[:500],
                                        content_hash=document.content_hash, size=len(document.text), changed_at=now)
                changed += 1
            elif row.content_hash != document.content_hash or row.title != document.title[:500]:
                row.content_hash, row.title, row.size, row.changed_at = (
                    document.content_hash, document.title[:500], len(document.text), now)
                row.save(update_fields=["content_hash", "title", "size", "changed_at"])
                changed += 1
        if existing:
            Document.objects.filter(pk__in=[d.pk for d in existing.values()]).delete()
            changed += len(existing)
    return changed


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


def index_build(kb: KnowledgeBase, *, progress=None, activate: bool = True) -> IndexVersion:
    """Ingest the source folder, build a new version of both indexes, validate it, then switch to it.

    A failed build is recorded as failed and leaves the active version untouched.
    """
    started = time.perf_counter()
    _fail_abandoned_builds(kb)
    if kb.versions.filter(status=IndexVersion.Status.BUILDING).exists():
        raise ServiceError("index_build_running", f"A build of {kb.slug} is already running.", status=409)
    try:
        documents = read_folder(Path(kb.source_dir))
    except IngestError as exc:
        raise ServiceError("source_not_found", str(exc)) from exc
    if not documents:
        raise ServiceError("source_empty", f"{kb.source_dir} holds no Markdown or HTML pages.")
    kb_sync_documents(kb, documents)
    engine = get_engine()
    version = IndexVersion.objects.create(
        kb=kb, name=_new_version_name(), model_id=engine.embedder.model_id,
        document_count=len(documents),
        corpus_hash=corpus_hash(documents),
        document_hashes={d.path: d.content_hash for d in documents},
    )
    try:
        chunks = chunk_documents(documents)
        counts: dict[str, int] = {}
        for chunk in chunks:
            counts[chunk.source] = counts.get(chunk.source, 0) + 1
        report = engine.store.build(kb.slug, version.name, chunks, engine.embedder,
                                    progress=_with_heartbeat(version, progress))
    except Exception as exc:  # noqa: BLE001 - any failure (IndexError_ or other) must leave the active version as it was
        log.exception("index build of %s failed", kb.slug)
        version.status = IndexVersion.Status.FAILED
        version.error = f"{type(exc).__name__}: {exc}"[:2000]
        version.save(update_fields=["status", "error"])
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
            IndexVersion.objects.filter(pk=version.pk).update(heartbeat_at=timezone.now())
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
    rows = ClassAlias.objects.filter(kb__isnull=True).values_list("alias", "class_name")
    aliases = dict(rows)
    aliases.update(ClassAlias.objects.filter(kb=kb).values_list("alias", "class_name"))
    return aliases


def search(
    *, kb: str, question, mode: str = "hybrid", top_k: int | None = None, exclude=(), version: str | None = None
) -> SearchResult:
    """Plan and search a question against a knowledge base's active version (or a named ready one)."""
    if not isinstance(question, str) or not question.strip():
        raise ServiceError("invalid_question", "The question must be a non-empty string.")
    if len(question) > MAX_QUESTION_CHARS:
        raise ServiceError("question_too_long", f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    if mode not in MODES:
        raise ServiceError("invalid_mode", f"Mode must be one of: {', '.join(MODES)}.")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K):
        raise ServiceError("invalid_top_k", f"top_k must be an integer from 1 to {MAX_TOP_K}.")
    knowledge_base = kb_get(kb)
    if version:
        row = knowledge_base.versions.filter(name=version, status=IndexVersion.Status.READY).first()
        if row is None:
            raise ServiceError("version_not_found", f"Version {version} of {kb} is not available.", status=404)
    else:
        row = knowledge_base.active_version
        if row is None:
            raise ServiceError("no_active_version", f"{kb} has no index yet; run `rag reindex --kb {kb}`.", status=409)
    searcher = get_engine().searcher(knowledge_base.slug, row.name, aliases_for(knowledge_base))
    return searcher.run(question, mode=mode, top_k=top_k, exclude=tuple(exclude))


def index_version_built_at(*, kb: str, version: str) -> str | None:
    """When a version of a knowledge base was built (ISO 8601), so a reader knows which docs it read."""
    built_at = IndexVersion.objects.filter(kb__slug=kb, name=version).values_list("built_at", flat=True).first()
    return built_at.isoformat() if built_at else None


@dataclass(frozen=True)
class AnswerResult:
    kb: str
    search: SearchResult
    answer: Answer
    generate_ms: float = 0.0


def answer_question(*, kb: str, question, exclude=(), top_k: int | None = None, meter=None,
                    version: str | None = None) -> AnswerResult:
    """Search, then answer from the adopted evidence, in one call (the model answers without streaming)."""
    for kind, value in answer_question_stream(kb=kb, question=question, exclude=exclude, top_k=top_k, meter=meter,
                                              stream=False, version=version):
        if kind == "final":
            return value
    raise AssertionError("answer_question_stream ended without a final answer")


def answer_question_stream(*, kb: str, question, exclude=(), top_k: int | None = None, meter=None,
                           cancelled=lambda: False, stream: bool = True, version: str | None = None):
    """Search, then answer: events ("plan", SearchResult), ("token", text)…, ("final", AnswerResult).

    Chitchat, out-of-catalog and empty evidence never reach the model (E7); search and chat share this
    retrieval, so one question sees one evidence set. `meter`, when given, is a context manager factory
    entered only around a real model call (the web channel's token pool), settled with the answer's usage.
    When `cancelled()` turns true (the reader went away) the model stream is closed and nothing more is
    yielded; the caller records the request as cancelled.
    """
    result = search(kb=kb, question=question, top_k=top_k, exclude=exclude, version=version)
    yield "plan", result
    hits = list(result.hits)
    answer = answer_without_model(result.plan, hits, excluded_all=bool(exclude) and not hits,
                                  weak_evidence=result.weak_evidence)
    started = time.perf_counter()
    if answer is None:
        generator = get_engine().generator
        metered = meter is not None and uses_model(generator)
        with (meter() if metered else contextlib.nullcontext()) as spend:
            if stream and hasattr(generator, "stream"):
                events = generator.stream(result.plan.corrected_question, result.plan, hits)
                try:
                    for kind, value in events:
                        if cancelled():
                            return
                        if kind == "token":
                            yield "token", value
                        else:
                            answer = value
                finally:
                    events.close()
            else:
                answer = generator.run(result.plan.corrected_question, result.plan, hits)
                yield "token", answer.text
            if spend is not None:
                spend.settle(answer.usage.total_tokens)
    else:
        yield "token", answer.text
    yield "final", AnswerResult(kb=kb, search=result, answer=answer,
                                generate_ms=round((time.perf_counter() - started) * 1000, 3))


def uses_model(generator) -> bool:
    return hasattr(generator, "client")


def new_request_id() -> str:
    import uuid

    return "req_" + uuid.uuid4().hex


CALLER_FIELDS = ("api_key_prefix", "tool", "arguments", "session_id", "transport")


def request_record_write(*, channel: str, kind: str, request_id: str, kb: str, question: str,
                         result: SearchResult | None = None, answer: Answer | None = None, error_code: str = "",
                         latency_ms: float = 0.0, generate_ms: float | None = None,
                         caller: dict | None = None) -> RequestRecord:
    """Store one request with its plan, the top of each route, what was adopted and answered, and its cost.

    `caller` names who asked through what: api_key_prefix, tool, arguments, session_id, transport (MCP).
    """
    fields = {key: value for key, value in (caller or {}).items() if key in CALLER_FIELDS}
    if result is not None:
        fields.update(
            index_version=result.version,
            plan=result.plan.as_dict(),
            retrieved={**{r.name: [[h.chunk.chunk_id, round(h.score, 5)] for h in r.hits[:20]] for r in result.rankings},
                       "fused": [[h.chunk.chunk_id, round(h.score, 5)] for h in result.fused[:20]]},
            adopted=[{"chunk_id": h.chunk.chunk_id, "score": round(h.score, 6), "class_name": h.chunk.class_name,
                      "member": h.chunk.member, "source": h.chunk.source} for h in result.hits],
            excluded=list(result.excluded),
            hit_count=len(result.hits),
            timings={**result.timings_ms, **({"generate": generate_ms} if generate_ms is not None else {})},
        )
    if answer is not None:
        fields.update(
            answer=answer.text, confidence=answer.confidence, mode=answer.mode, degraded=answer.degraded,
            reason=answer.reason, prompt_tokens=answer.usage.prompt_tokens,
            completion_tokens=answer.usage.completion_tokens,
            citations=[{"number": c.number, "chunk_id": c.chunk_id, "source": c.source} for c in answer.citations],
        )
    return RequestRecord.objects.create(channel=channel, kind=kind, request_id=request_id, kb=kb,
                                        question=question[:MAX_QUESTION_CHARS], error_code=error_code,
                                        latency_ms=round(latency_ms, 3), **fields)


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

"""One request on its way through the question service: `QuestionCall` validates it, counts it in flight,
resolves the knowledge base's version, runs the engine's search, and writes exactly one request record (for a
success and for every failure) under one policy (`rag.services.records`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from typing import ContextManager

from django.conf import settings

from infra import live
from infra.errors import ServiceError
from rag.engine.embed import EmbeddingBusy
from rag.engine.sdk import VersionNote
from rag.engine.types import Hit, SearchResult
from rag.models import IndexVersion, RequestRecord
from rag.pipeline import get_engine
from rag.retrieval_cache import retrieval_cache
from rag.services.knowledge import (BUILDING_RETRY_AFTER, building_message, index_building, kb_get_current,
                                    kb_searcher)
from rag.services.profiles import Profile, profile_of
from rag.services.records import new_request_id, request_record_write
from rag.services.sdk import kb_serving, version_notes

from .request import QuestionRequest, request_options, validated

BUSY_RETRY_AFTER = 2  # seconds: a queue of embeddings drains in about that
Kind = RequestRecord.Kind
INTERNAL = ServiceError("internal_error", "The request failed on the server.", status=500)
CANCELLED = ServiceError("cancelled", "The reader went away before the answer was complete.", status=499)


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    request_id: str
    question: str  # as asked
    kb: str
    version: str
    built_at: str | None  # when that version was built (ISO 8601): which docs the reader saw
    result: SearchResult
    latency_ms: float = 0.0
    candidates: tuple[Hit, ...] = ()  # the adopted hits, then the next ranked ones (QuestionRequest.candidates)
    profile: Profile | None = None  # what served the search (its fingerprint)
    cached: SearchOutcome | None = None  # on a cache hit: the outcome as it was first computed
    source_revision: str = ""  # the git commit, or the website crawl, that version was built from; "" for a folder
    sdk: str = ""  # the SDK whose version was read ("" for a knowledge base without versions)
    sdk_version: str = ""  # the SDK version read: every face says which one it served
    version_notes: tuple[VersionNote, ...] = ()  # API names asked that this version lacks and another documents


def question_call(request: QuestionRequest, kind: str = Kind.CHAT) -> QuestionCall:
    """One request of a face whose model call is its own (CG_RAG's vision routes): a context manager that
    counts it in flight and records it once; `call.search()` searches as every face does, `call.record(...)`
    records the outcome, and a failure that escapes is recorded with its code."""
    return QuestionCall(request, kind)


def question_refused(request: QuestionRequest, *, kind: str, error: ServiceError) -> None:
    """Record a request a face refused before asking (a key's rate limit or quota): every request leaves
    one record, refused ones too."""
    with live.in_flight(request.channel):
        call = QuestionCall(request, kind)
        call.fail(error)


class QuestionCall:
    """One request: its id and start, validation, the version it reads, and the one record it leaves.

    As a context manager it counts the request in flight and records any failure that escapes it (a
    ServiceError with its code, anything else as `internal_error`); a block left without a record (a
    stream closed by its reader) is recorded as cancelled.
    """

    def __init__(self, request: QuestionRequest, kind: str):
        self.request = request
        self.kind = kind
        self.request_id = new_request_id()
        self.started = time.perf_counter()
        self.kb = request.kb if request.kb is not None else settings.RAG_DEFAULT_KB
        self.recorded = False
        self.result: SearchResult | None = None  # kept for the record when answering fails after the search
        self._in_flight = None

    def __enter__(self) -> QuestionCall:
        self._in_flight = live.in_flight(self.request.channel)
        self._in_flight.__enter__()
        return self

    def __exit__(self, kind, exc, traceback) -> bool:
        try:
            if isinstance(exc, ServiceError):
                exc.request_id = self.request_id
            if exc is not None and not self.recorded:
                self.fail(exc if isinstance(exc, ServiceError) else INTERNAL if isinstance(exc, Exception)
                          else CANCELLED)
            elif not self.recorded:
                self.fail(CANCELLED)
        finally:
            self._in_flight.__exit__(kind, exc, traceback)
        return False

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def search(self) -> SearchOutcome:
        request = self.request
        # An answer's evidence gets the sections its structure calls for (complete).
        question, options = validated(request, complete=self.kind == Kind.CHAT)
        served = kb_serving(self.kb, request.sdk_version)
        self.kb = served.kb  # the record names the version read (`three@2.0`): traffic and failures per version
        knowledge_base = kb_get_current(served.kb)
        row = version_of(knowledge_base, request.version)
        profile = profile_of(knowledge_base.slug, row) if request.cache else None
        # The profile names the version (and the models): a reindex never hits an old entry.
        key = (knowledge_base.slug, profile.id, question.strip(), options) if profile is not None else None
        cached = retrieval_cache().get(key) if key is not None else None
        if cached is not None:
            self.result = cached.result
            return replace(cached, request_id=self.request_id, question=question,
                           latency_ms=round(self.elapsed_ms(), 3), cached=cached,
                           version_notes=version_notes(served, question))
        searcher = kb_searcher(knowledge_base, row.name)
        with held(request, "retrieval"):
            try:
                result = self.result = searcher.run(question, options)
            except EmbeddingBusy as exc:  # the model is queued past its bound: refuse now, not after a long wait
                raise ServiceError("busy", f"The server is busy ({exc}); try again shortly.", status=503,
                                   headers={"Retry-After": str(BUSY_RETRY_AFTER)}) from None
        outcome = SearchOutcome(request_id=self.request_id, question=question, kb=knowledge_base.slug, version=row.name,
                                built_at=row.built_at.isoformat() if row.built_at else None, result=result,
                                latency_ms=round(self.elapsed_ms(), 3),
                                candidates=ranked_candidates(result, request.candidates), profile=profile,
                                source_revision=row.source_revision, sdk=served.sdk, sdk_version=served.sdk_version,
                                version_notes=version_notes(served, question))
        if key is not None:
            retrieval_cache().put(key, outcome)
        return outcome

    def record(self, *, result=None, answer=None, error=None, generate_ms=None) -> None:
        if self.recorded:
            return
        self.recorded = True
        if not self.request.record:
            return
        request_record_write(request_id=self.request_id, channel=self.request.channel, kind=self.kind,
                             question=self.request.question, kb=self.kb, caller=self.request.caller,
                             options=request_options(self.request), result=result, answer=answer, error=error,
                             latency_ms=self.elapsed_ms(), generate_ms=generate_ms)

    def fail(self, error: ServiceError) -> None:
        self.record(result=self.result, error=error)


def held(request: QuestionRequest, resource: str) -> ContextManager[None]:
    return request.capacity.hold(resource) if request.capacity is not None else contextlib.nullcontext()


def ranked_candidates(result: SearchResult, count: int | None) -> tuple[Hit, ...]:
    """The adopted hits, then the reranked and fused order after them, each chunk once, excluded ones left out."""
    if not count:
        return ()
    excluded = set(result.excluded)
    ranked: dict[str, Hit] = {}
    for hit in (*result.hits, *result.reranked, *result.fused):
        chunk_id = hit.chunk.chunk_id
        if chunk_id not in ranked and chunk_id not in excluded:
            ranked[chunk_id] = hit
            if len(ranked) == count:
                break
    return tuple(ranked.values())


def version_of(knowledge_base, name: str | None) -> IndexVersion:
    """The named ready version, else the active one, opened in this process; while the active one does not open
    (missing or corrupt files), the version active before it that does. Raise version_not_found, index_building,
    no_active_version, or index_unavailable (503 with Retry-After) when no version opens."""
    from rag.engine.index import IndexError_
    from rag.services.knowledge import index_fallback, index_unavailable, index_version_mark_used

    engine = get_engine()
    if name:
        row = knowledge_base.versions.filter(name=name, status=IndexVersion.Status.READY).first()
        if row is None:
            raise ServiceError("version_not_found", f"Version {name} of {knowledge_base.slug} is not available.",
                               status=404)
        try:
            engine.reader(knowledge_base.slug, row.name)
        except IndexError_:
            raise index_unavailable(knowledge_base) from None
        index_version_mark_used(row)  # pruning keeps a version a replay or an eval run is asking
        return row
    if knowledge_base.active_version is None:
        building = index_building(knowledge_base)
        if building is not None:
            raise ServiceError("index_building", building_message(knowledge_base, building), status=503,
                               headers={"Retry-After": str(BUILDING_RETRY_AFTER)})
        raise ServiceError("no_active_version",
                           f"{knowledge_base.slug} has no index yet; run `rag reindex --kb {knowledge_base.slug}`.",
                           status=409)
    row = knowledge_base.active_version
    try:
        engine.reader(knowledge_base.slug, row.name)
    except IndexError_ as exc:
        row = index_fallback(knowledge_base, exc)
    engine.note_active(knowledge_base.slug, row.name)
    return row

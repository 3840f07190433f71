"""Retrieval without generation (R1 to R5): ranked chunks from several knowledge bases with the seed 002 controls.

The open retrieval API, the RAGFlow-compatible API and Dify's external knowledge API are faces over
`question_retrieve`: each parses its own request into a `RetrievalRequest` and shapes the `RetrievalOutcome`
its own way. The service resolves and checks the knowledge bases, merges the settings (`setting_of`), filters
the documents (`rag.services.filters`) and hands the engine's `WeightedSearcher` (rag.engine.weighted) one source
per knowledge base; it then cuts the window, looks the documents up, shows the chunks and leaves one request
record through the question service's `question_call`, for a success and for every failure.

Order of the stages (the engine's): for each knowledge base the `top_k` best chunks by similarity (within the
filter); merged in similarity order (grouped by priority when asked: p0's knowledge bases, then p1's, p2's and the
others, each group in similarity order), the first `top_k` of them; those at or above `similarity_threshold`;
reranked when asked (the API, then the model), those at or above `rank_score_threshold`, grouped by priority again;
`total` counts them all, and the window `[offset, offset + top_n)` is returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from infra.errors import ServiceError
from rag.engine.types import Hit, Plan, Ranking, RouteKind, SearchResult, Usage
from rag.engine.weighted import (RerankFailed, WeightedCandidate, WeightedSetting, WeightedSource, content_tokens,
                                 highlight, important_keywords)
from rag.models import Channel, Document, KnowledgeBase, RequestRecord, RetrievalApp
from rag.pipeline import get_engine
from rag.services.filters import DocumentFilter, documents_allowed, is_id
from rag.services.knowledge import kb_searcher
from rag.services.questions import Caller, CapacityGate, QuestionRequest, held, question_call, validated_question, version_of
from rag.services.sdk import kb_serving

MAX_TOP_K = 1024  # candidates (RAGFlow's SDK asks for 1024 by default)
MAX_TOP_N = 1024  # chunks returned in one window
MAX_KBS = 50
PRIORITIES = ("p0", "p1", "p2")


@dataclass(frozen=True, slots=True)
class RetrievalSetting:
    """Seed 002's `rag_setting`, with this product's defaults."""

    similarity_threshold: float = 0.2
    dense_weight: float = 0.5
    top_k: int = 30
    top_n: int = 30
    enable_rerank: bool = False
    enable_llm_rerank: bool = False
    rank_score_threshold: float = 0.0
    label_value_ids: tuple[int, ...] = ()
    enable_agent_enhance_search: bool = False
    enable_kb_priority: bool = False
    kb_priority: tuple[tuple[str, tuple], ...] = ()  # ("p0", (kb ids…)), …
    extra: dict = field(default_factory=dict)

    def ranking(self) -> WeightedSetting:
        """What the engine's ranking reads of it."""
        return WeightedSetting(
            dense_weight=self.dense_weight, top_k=self.top_k, similarity_threshold=self.similarity_threshold,
            rerank=tuple(name for name, wanted in (("api", self.enable_rerank), ("llm", self.enable_llm_rerank))
                         if wanted),
            rank_score_threshold=self.rank_score_threshold, by_priority=self.enable_kb_priority)


def _invalid(name: str, rule: str) -> ServiceError:
    return ServiceError("invalid_rag_setting", f"rag_setting.{name} must be {rule}.")


def _number(name: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _invalid(name, f"a number from {low:g} to {high:g}")
    return float(value)


def _integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(name, f"an integer from {low} to {high}")
    return value


def _flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise _invalid(name, "true or false")
    return value


def _ids(name: str, value, limit: int = 1000) -> tuple:
    if not isinstance(value, list | tuple) or len(value) > limit or not all(is_id(v) for v in value):
        raise _invalid(name, f"a list of at most {limit} ids")
    return tuple(value)


_CHECKS = {
    "similarity_threshold": lambda v: _number("similarity_threshold", v, 0, 1),
    "dense_weight": lambda v: _number("dense_weight", v, 0, 1),
    "top_k": lambda v: _integer("top_k", v, 1, MAX_TOP_K),
    "top_n": lambda v: _integer("top_n", v, 1, MAX_TOP_N),
    "enable_rerank": lambda v: _flag("enable_rerank", v),
    "enable_llm_rerank": lambda v: _flag("enable_llm_rerank", v),
    "rank_score_threshold": lambda v: _number("rank_score_threshold", v, 0, 1),
    "label_value_ids": lambda v: _label_value_ids(v),
    "enable_agent_enhance_search": lambda v: _flag("enable_agent_enhance_search", v),
    "enable_kb_priority": lambda v: _flag("enable_kb_priority", v),
    "kb_priority": lambda v: _kb_priority(v),
    "extra": lambda v: _extra(v),
}


def _label_value_ids(value) -> tuple[int, ...]:
    ids = _ids("label_value_ids", value)
    if not all(isinstance(v, int) for v in ids):
        raise _invalid("label_value_ids", "a list of label value ids (integers)")
    return ids


def _kb_priority(value) -> tuple[tuple[str, tuple], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict) or set(value) - set(PRIORITIES):
        raise _invalid("kb_priority", "an object with the keys p0, p1 and p2, each a list of knowledge base ids")
    return tuple((name, _ids(f"kb_priority.{name}", value[name] or [], MAX_KBS)) for name in PRIORITIES if name in value)


def _extra(value) -> dict:
    if not isinstance(value, dict):
        raise _invalid("extra", "an object")
    return value


def setting_of(*layers) -> RetrievalSetting:
    """Merge settings field by field, later layers over earlier ones (the app's defaults, the request's
    `rag_setting`, then `metadata.rag_setting`; a face's own defaults come first); `None` in a layer leaves the field as it was. Unknown fields are
    ignored; a bad value raises `invalid_rag_setting` naming the field."""
    values: dict = {}
    for layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, dict):
            raise ServiceError("invalid_rag_setting", "rag_setting must be an object.")
        for name, value in layer.items():
            if name in _CHECKS and value is not None:
                values[name] = _CHECKS[name](value)
    return RetrievalSetting(**values)


def retrieval_app_create(*, name: str, kb_slugs: list[str], published: bool = True,
                         rag_setting: dict | None = None) -> RetrievalApp:
    """Create a retrieval app over the named knowledge bases, with checked default settings."""
    if not name or not name.strip():
        raise ServiceError("invalid_app_name", "Give the app a name.")
    setting_of(rag_setting or {})
    kbs = [KnowledgeBase.objects.filter(slug=slug).first() for slug in kb_slugs]
    missing = [slug for slug, kb in zip(kb_slugs, kbs) if kb is None]
    if missing:
        raise ServiceError("kb_not_found", f"No knowledge base {', '.join(missing)}.", status=404)
    app = RetrievalApp.objects.create(name=name.strip()[:100], published=published, rag_setting=rag_setting or {})
    app.knowledge_bases.set(kbs)
    return app


# -- what was asked, what was found ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetrievalRequest:
    """One retrieval as a face received it. `kb_ids` are knowledge base ids (integers or their decimal strings)
    or slugs; `settings` are the layers `setting_of` merges after the app's own defaults."""

    question: object
    channel: Channel
    kb_ids: object
    app: RetrievalApp | None = None  # the caller's app: its knowledge bases bound the search, its settings are defaults
    defaults: dict | None = None  # the face's own defaults, under the app's (RAGFlow's vector weight 0.3, top_k 1024)
    settings: tuple = ()
    filter: DocumentFilter = field(default_factory=DocumentFilter)
    offset: int = 0  # the window's first chunk (a face's pages)
    summary: bool = True  # an enhanced search also writes `summary` (RAGFlow's `keyword` asks for keywords only)
    caller: Caller = field(default_factory=Caller)
    capacity: CapacityGate | None = None


@dataclass(frozen=True, slots=True)
class RetrievedChunk:
    chunk_id: str
    text: str
    kb: KnowledgeBase
    document: Document | None  # None only for a page the database no longer lists
    title: str  # the heading path
    similarity: float
    vector_similarity: float
    term_similarity: float
    rank_score: float | None  # when reranked
    tokens: tuple[str, ...]  # the content as the index tokenizes it
    keywords: tuple[str, ...]  # its top keywords by BM25 weight
    highlight: str
    source: str  # the page's path

    @property
    def score(self) -> float:
        return self.rank_score if self.rank_score is not None else self.similarity


@dataclass(frozen=True, slots=True)
class DocumentAggregate:
    document: Document | None
    source: str
    title: str
    count: int
    avg_score: float
    semantic_score: float  # the mean vector similarity of its chunks


@dataclass(frozen=True, slots=True)
class RetrievalOutcome:
    request_id: str
    question: str
    total: int  # chunks that passed every threshold, before the window
    chunks: tuple[RetrievedChunk, ...]  # the window
    doc_aggs: tuple[DocumentAggregate, ...]  # over every passing chunk, most chunks first
    summary: str
    setting: RetrievalSetting
    usage: Usage  # what the model calls (rerank, keywords, summary) cost
    freshness: tuple[str, ...] = ()  # per base searched: "<kb>@<version> built <ISO time>[ rev <revision>]"


NOT_CONFIGURED = {
    "rerank": ServiceError("rerank_not_configured", "enable_rerank needs a rerank API (RAG_RERANK_BASE_URL); "
                           "none is configured.", status=409),
    "llm": ServiceError("generation_not_configured", "This option needs a generation model "
                        "(RAG_GENERATION_BASE_URL); none is configured.", status=409),
}


def question_retrieve(request: RetrievalRequest) -> RetrievalOutcome:
    """Rank chunks of the requested knowledge bases for a question; record the request once."""
    joined = _joined_slugs(request.kb_ids)
    record_request = QuestionRequest(question=request.question, channel=request.channel, kb=joined,
                                     caller=request.caller, capacity=request.capacity)
    with question_call(record_request, RequestRecord.Kind.SEARCH) as call:
        question = validated_question(request.question).strip()
        app = request.app
        if app is not None and not app.published:
            raise ServiceError("app_not_published", f"Retrieval app {app.pk} is not published.", status=403)
        setting = setting_of(request.defaults, app.rag_setting if app is not None else None, *request.settings)
        kbs = knowledge_bases_of(request.kb_ids, app)
        call.kb = ",".join(kb.slug for kb in kbs)[:64]
        if not isinstance(request.offset, int) or request.offset < 0:
            raise ServiceError("invalid_page", "The page must be a positive integer.")
        engine = get_engine()
        ranking = setting.ranking()
        _check_rerankers(engine, ranking)  # an option without its model fails whatever the question finds
        usage = Usage()
        keywords = ""
        if setting.enable_agent_enhance_search:
            keywords, usage = _enhanced(engine, question)
        document_filter = replace(request.filter, label_value_ids=request.filter.label_value_ids
                                  or setting.label_value_ids)
        allowed = documents_allowed(kbs, document_filter)  # None: every document
        group_of = _priority_groups(setting.kb_priority, kbs) if setting.enable_kb_priority else {}
        sources, versions, freshness = [], [], []
        by_id = {kb.pk: kb for kb in kbs}
        with held(record_request, "retrieval"):
            for kb in kbs:
                row = version_of(kb, None)
                versions.append(f"{kb.slug}@{row.name}")
                built = row.built_at.isoformat(timespec="seconds") if row.built_at else "unknown"
                freshness.append(f"{kb.slug}@{row.name} built {built}"
                                 + (f" rev {row.source_revision}" if row.source_revision else ""))
                reader = engine.reader(kb.slug, row.name)
                sources.append(WeightedSource(
                    key=kb.pk, reader=reader, planner=kb_searcher(kb, row.name).planner,
                    mask=_mask(reader, allowed.get(kb.pk, set())) if allowed is not None else None,
                    group=group_of.get(kb.pk, len(PRIORITIES))))
            try:
                ranked = engine.weighted.run(question, sources, ranking, keywords=keywords)
            except RerankFailed as exc:
                raise ServiceError("rerank_failed", f"The reranker gave no order: {exc}", status=502) from None
        usage += ranked.usage
        timings, rerank = dict(ranked.timings_ms), ranked.rerank
        passing = list(ranked.passing)
        window = passing[request.offset:request.offset + setting.top_n]
        documents = _documents(passing)
        chunks = tuple(_shown(c, by_id[c.source.key], documents) for c in window)
        summary = ""
        if setting.enable_agent_enhance_search and request.summary and chunks:
            summary, summary_usage = _summary(engine, question, window)
            usage += summary_usage
        outcome = RetrievalOutcome(
            request_id=call.request_id, question=question, total=len(passing), chunks=chunks,
            doc_aggs=_aggregates(passing, documents), summary=summary, setting=setting, usage=usage,
            freshness=tuple(freshness))
        call.record(result=_search_result(question, window, ",".join(versions), timings, rerank, keywords))
        return outcome


def _joined_slugs(kb_ids) -> str:
    """What the record names before the knowledge bases are resolved: the ids as given, cut to size."""
    if isinstance(kb_ids, list | tuple):
        return ",".join(str(k) for k in kb_ids)[:64]
    return str(kb_ids)[:64] if kb_ids is not None else ""


def knowledge_bases_of(kb_ids, app: RetrievalApp | None) -> list[KnowledgeBase]:
    """Resolve ids (integers or their decimal strings) and slugs, each once, in order; within the app's
    knowledge bases when there is an app."""
    if kb_ids is None or (isinstance(kb_ids, list | tuple) and not kb_ids):
        raise ServiceError("kb_ids_required", "Name at least one knowledge base to search.")
    if not isinstance(kb_ids, list | tuple) or len(kb_ids) > MAX_KBS or not all(is_id(k) for k in kb_ids):
        raise ServiceError("invalid_kb_ids", f"kb_ids must be a list of at most {MAX_KBS} knowledge base ids.")
    found: list[KnowledgeBase] = []
    for given in dict.fromkeys(kb_ids):
        lookup = {"pk": int(given)} if isinstance(given, int) or given.isdigit() else {"slug": given}
        kb = KnowledgeBase.objects.select_related("active_version").filter(**lookup).first()
        if kb is None and isinstance(given, str) and "@" in given:  # `three@stable`: an alias of an SDK version
            kb = KnowledgeBase.objects.select_related("active_version").filter(slug=kb_serving(given).kb).first()
        if kb is None:
            raise ServiceError("kb_not_found", f"Knowledge base {given} does not exist.", status=404)
        if kb.active_version_id is None and kb.sdk_versions.exists():  # an SDK is searched in its latest version
            kb = KnowledgeBase.objects.select_related("active_version").get(slug=kb_serving(kb.slug).kb)
        if kb not in found:
            found.append(kb)
    if app is not None:
        allowed = set(app.knowledge_bases.values_list("pk", flat=True))  # an SDK's app may search all its versions
        outside = [str(kb.pk) for kb in found if kb.pk not in allowed and kb.sdk_id not in allowed]
        if outside:
            raise ServiceError("kb_not_allowed", f"Knowledge base {', '.join(outside)} is not one of the app's.",
                               status=403)
    return found


def retrieval_app_check(*, key_app: RetrievalApp | None, app_id) -> RetrievalApp:
    """The app of an open call: the one the key is bound to, which must be the one named and published."""
    if app_id is None:
        raise ServiceError("app_id_required", "Name the retrieval app (dialog_id or app_id).")
    if not is_id(app_id) or not str(app_id).isdigit():
        raise ServiceError("invalid_app_id", "dialog_id and app_id must be positive integers.")
    if key_app is None:
        raise ServiceError("key_not_bound", "This API key is not bound to a retrieval app.", status=403)
    if key_app.pk != int(app_id):
        raise ServiceError("app_mismatch", f"This API key is bound to another app than {app_id}.", status=403)
    if not key_app.published:
        raise ServiceError("app_not_published", f"Retrieval app {app_id} is not published.", status=403)
    return key_app


def _mask(reader, paths: set[str]) -> np.ndarray:
    return np.fromiter((c.source in paths for c in reader.chunks), dtype=bool, count=reader.count)


def _check_rerankers(engine, ranking: WeightedSetting) -> None:
    missing = engine.weighted.missing(ranking)
    if missing:
        raise NOT_CONFIGURED["rerank" if missing[0] == "api" else "llm"]


def _priority_groups(priority: tuple[tuple[str, tuple], ...], kbs) -> dict[int, int]:
    """Each knowledge base's priority group: 0 for p0's, 1 for p1's, 2 for p2's (the first that names it); the
    others are left out (they come last)."""
    group_of: dict[int, int] = {}
    for rank, (_, ids) in enumerate(priority):
        for given in ids:
            for kb in kbs:
                if kb.pk not in group_of and (str(kb.pk) == str(given) or kb.slug == given):
                    group_of[kb.pk] = rank
    return group_of


def _documents(passing: list[WeightedCandidate]) -> dict[tuple[int, str], Document]:
    pairs = {(c.source.key, c.hit.chunk.source) for c in passing}
    if not pairs:
        return {}
    rows = Document.objects.filter(kb_id__in={kb for kb, _ in pairs}, path__in={p for _, p in pairs}) \
        .prefetch_related("document_labels__value__label")
    return {(d.kb_id, d.path): d for d in rows}


def _shown(candidate: WeightedCandidate, kb: KnowledgeBase, documents: dict) -> RetrievedChunk:
    hit, reader, chunk = candidate.hit, candidate.source.reader, candidate.hit.chunk
    return RetrievedChunk(
        chunk_id=chunk.chunk_id, text=chunk.text, kb=kb, document=documents.get((kb.pk, chunk.source)),
        title=" > ".join(chunk.heading_path) or chunk.title,
        similarity=round(hit.similarity, 6), vector_similarity=round(hit.vector_similarity, 6),
        term_similarity=round(hit.term_similarity, 6),
        rank_score=round(candidate.rank_score, 6) if candidate.rank_score is not None else None,
        tokens=tuple(content_tokens(reader, chunk)), keywords=tuple(important_keywords(reader, chunk)),
        highlight=highlight(reader, chunk.text, candidate.tokens), source=chunk.source)


def _aggregates(passing: list[WeightedCandidate], documents: dict) -> tuple[DocumentAggregate, ...]:
    groups: dict[tuple[int, str], list[WeightedCandidate]] = {}
    for candidate in passing:
        groups.setdefault((candidate.source.key, candidate.hit.chunk.source), []).append(candidate)
    aggregates = [DocumentAggregate(document=documents.get(key), source=key[1],
                                    title=members[0].hit.chunk.title, count=len(members),
                                    avg_score=round(sum(c.score for c in members) / len(members), 6),
                                    semantic_score=round(sum(c.hit.vector_similarity for c in members) / len(members), 6))
                  for key, members in groups.items()]
    return tuple(sorted(aggregates, key=lambda a: (-a.count, -a.avg_score, a.source)))


def _enhanced(engine, question: str) -> tuple[str, Usage]:
    enhancer = engine.enhancer
    if enhancer is None:
        raise NOT_CONFIGURED["llm"]
    rewrite = enhancer.run(question)
    if rewrite.error:
        raise ServiceError("enhance_failed", f"The model gave no search keywords: {rewrite.error}", status=502)
    return rewrite.keywords, rewrite.usage


def _summary(engine, question: str, window: list[WeightedCandidate]) -> tuple[str, Usage]:
    """The model's answer from the returned chunks: the `summary` of an enhanced search."""
    generator = engine.generator
    if not generator.uses_model:
        raise NOT_CONFIGURED["llm"]
    hits = [Hit(chunk=c.hit.chunk, score=c.score, source="weighted", rank=n) for n, c in enumerate(window, start=1)]
    answer = generator.run(question, Plan(question=question, corrected_question=question, kind="doc"), hits)
    if answer.degraded:
        raise ServiceError("enhance_failed", f"The model wrote no summary: {answer.reason}", status=502)
    return answer.text, answer.usage


def _search_result(question: str, window: list[WeightedCandidate], versions: str, timings: dict, rerank: str,
                   keywords: str) -> SearchResult:
    """The record's view of a retrieval: the returned chunks as the adopted ones, with their final scores."""
    hits = tuple(Hit(chunk=c.hit.chunk, score=c.score, source="weighted", rank=n, raw_score=c.hit.similarity)
                 for n, c in enumerate(window, start=1))
    ranking = Ranking(name="weighted", hits=hits, kind=RouteKind.DENSE, weight=1.0)
    return SearchResult(plan=Plan(question=question, corrected_question=question, kind="doc"), hits=hits,
                        rankings=(ranking,), fused=hits, timings_ms=timings, version=versions[:64], rerank=rerank,
                        rewrite=keywords)

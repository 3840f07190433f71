"""The CG_RAG face (seed 004): parse the seed's request, call the one question service, shape the seed's reply.

Field names are the seed's and are never renamed: a candidate is `law_name` (the document title),
`article_number` (its heading path or member) and `contents` (the chunk text), with our own fields beside
them. Searches go through `question_search` with the retrieval cache and the capacity gate; constrained
generation through `question_choose` / `question_choose_stream`. Every request is one record (channel
`cgrag`, or `search_r1` for the batch form of /retrieve).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest

from cgrag import scopes
from cgrag.http import error_body, error_of, route, sse_response
from cgrag.inputs import (ConstrainedGenerateInput, InvalidRequest, RagInput, RetrieveRerankInput, WarmupInput, invalid,
                          parse)
from rag.capacity import CapacityGate, capacity_stats
from rag.errors import ServiceError
from rag.models import Channel
from rag.retrieval_cache import retrieval_cache
from rag.services.profiles import profile_of, rerank_summary, embedding_summary
from rag.services.questions import (Caller, Candidate, ChoiceEvent, ChoiceOutcome, GenerationEvent, QuestionRequest,
                                    RetrievalEvent, SearchOutcome, TokenEvent, candidate_of, question_choose,
                                    question_choose_stream, question_search)

HTTP_PREFIX = "/cg-rag"
MCP_PATH = "/cg-rag/mcp"


def _config() -> dict:
    return settings.RAG_CGRAG


def _caller(request_id: str, arguments: dict) -> Caller:
    return Caller(transport="http", arguments={**arguments, "x_request_id": request_id})


def _question(query: str, slug: str, topk: int, request_id: str, arguments: dict,
              channel: Channel = Channel.CGRAG) -> QuestionRequest:
    return QuestionRequest(question=query, channel=channel, kb=slug, candidates=topk, cache=True,
                           caller=_caller(request_id, arguments), capacity=CapacityGate())


# -- shapes --------------------------------------------------------------------------------------------------


def doc_of(hit, rank: int) -> dict:
    """A candidate in the seed's names, then ours."""
    candidate, chunk = candidate_of(hit), hit.chunk
    return {"law_name": candidate.title, "article_number": candidate.article, "contents": candidate.text,
            "chunk_id": chunk.chunk_id, "source": chunk.source, "class_name": chunk.class_name,
            "member": chunk.member, "rank": rank, "score": round(float(hit.score), 6), "score_source": hit.source}


def pipeline_of(outcome: SearchOutcome, item: dict, *, cached: bool = False) -> dict:
    result = outcome.result
    timings = result.timings_ms
    rerank_ms = 0.0 if cached else round(float(timings.get("rerank", 0.0)), 3)
    total_ms = round(outcome.latency_ms if cached else float(timings.get("total", outcome.latency_ms)), 3)
    pipeline = {
        "requested_scope": item["requested_scope"], "active_scope": item["active_scope"],
        "scope_switched": item["scope_switched"], "profile_fingerprint": outcome.profile.id if outcome.profile else "",
        "index_version": outcome.version,
        "rerank_enabled": result.rerank != "none", "api_rerank_enabled": result.rerank == "api",
        "rerank_backend": result.rerank,
        "retrieval_time_ms": round(total_ms - rerank_ms, 3), "rerank_time_ms": rerank_ms,
        "search_total_time_ms": total_ms,
    }
    if result.rerank_error:
        pipeline["rerank_error"] = result.rerank_error
    return pipeline


def cache_of(hit: bool) -> dict:
    return {"hit": hit, **retrieval_cache().stats()}


def retrieval_of(outcome: SearchOutcome, item: dict, topk: int, *, with_cache: bool = True) -> dict:
    """retrieve-rerank's body (without request_id); /retrieve leaves the cache out."""
    hit = outcome.cached is not None
    body = {"query": outcome.question.strip(), "num_docs": len(outcome.candidates), "topk": topk,
            "scope": outcome.kb, "profile_fingerprint": outcome.profile.id if outcome.profile else "",
            "profile_fingerprint_summary": outcome.profile.summary if outcome.profile else {}}
    if with_cache:
        body["cache"] = cache_of(hit)
    body["pipeline"] = pipeline_of(outcome, item, cached=hit)
    if hit:
        body["cached_pipeline"] = pipeline_of(outcome.cached, item)
    body["retrieval_docs"] = [doc_of(h, n) for n, h in enumerate(outcome.candidates, start=1)]
    return body


def generation_of(outcome: ChoiceOutcome, *, include_debug: bool) -> dict:
    """constrained-generate's body (without request_id): compact unless include_debug."""
    choice, error = outcome.choice, outcome.error
    if error is not None:
        body = {"ok": False, "error": {"code": error.code, "message": error.message, "details": {}},
                "pred_indices": [], "pred_items": [], "pred_raw": outcome.raw}
    else:
        body = {"ok": True, "generation_mode": "constrained", "answer_text": choice.answer_text,
                "pred_indices": list(choice.indices), "pred_items": list(choice.items), "pred_raw": choice.raw,
                "thinking": choice.thinking if include_debug else "",
                "generation_enable_thinking": choice.thinking_enabled, "usage": choice.usage.as_dict()}
    if include_debug:
        body["debug"] = {"record_request_id": outcome.request_id, "num_candidates": len(outcome.candidates),
                         "generation_time_ms": outcome.generate_ms, "latency_ms": outcome.latency_ms,
                         "model": settings.RAG_ENGINE["GENERATION_MODEL"],
                         "candidates": [{"index": n, "item": c.item} for n, c in enumerate(outcome.candidates, 1)]}
    return body


# -- routes --------------------------------------------------------------------------------------------------


@route("GET")
def health(request: HttpRequest, request_id: str) -> dict:
    bases = scopes.knowledge_bases()
    active = scopes.active_scope()
    active_kb = next((kb for kb in bases if kb.slug == scopes.aliases().get(active, active)), None)
    profile = profile_of(active_kb.slug, active_kb.active_version) if active_kb is not None else None
    engine, config = settings.RAG_ENGINE, _config()
    generation_url = engine["GENERATION_BASE_URL"]
    issues = []
    if not generation_url or not engine["GENERATION_MODEL"]:
        issues.append({"code": "generation_not_configured",
                       "message": "No generation model (RAG_GENERATION_BASE_URL, RAG_GENERATION_MODEL): "
                                  "retrieve-rerank works, constrained generation answers generation_not_configured."})
    if not bases:
        issues.append({"code": "no_scopes", "message": "No knowledge base exists yet."})
    issues += [{"code": "scope_not_ready", "message": f"Scope {kb.slug!r} has no active index version yet."}
               for kb in bases if kb.active_version is None]
    from cgrag.vision import vision_health  # noqa: PLC0415 - the vision routes live in their own module

    return {
        "ok": True, "request_id": request_id, "service": "CG_RAG", "http_prefix": HTTP_PREFIX, "mcp_path": MCP_PATH,
        "available_scopes": scopes.available_scopes(bases), "default_scope": scopes.default_scope(),
        "active_scope": active, "config_issues": issues,
        "generation": {
            "configured": bool(generation_url and engine["GENERATION_MODEL"]),
            "provider": _provider(),
            "endpoint_configured": bool(generation_url),
            "endpoint_host": urlsplit(generation_url).hostname or "" if generation_url else "",
            "model": engine["GENERATION_MODEL"], "response_format_json": True,
            "enable_thinking": engine["GENERATION_THINKING"], "streaming": True,
            "stream_answer_token_delay_seconds": config["STREAM_TOKEN_DELAY"],
            "timeout_seconds": float(engine["GENERATION_READ_TIMEOUT"]),
            "max_context_docs": config["DEFAULT_TOPK"], "default_max_items": config["DEFAULT_MAX_ITEMS"],
        },
        "vision": vision_health(),
        "rerank": {"api_enabled": bool(engine["RERANK_BASE_URL"]), "model": rerank_summary()["model"],
                   "backend": rerank_summary()["backend"]},
        "retriever": scopes.retriever_state(bases),
        "profile_fingerprint": {"id": profile.id, "summary": profile.summary} if profile else
        {"id": "", "summary": {"scope": active, "embedding_api": embedding_summary(None), "rerank": rerank_summary()}},
        "retrieve_cache": retrieval_cache().stats(),
        "capacity": capacity_stats(),
    }


def _provider() -> str:
    from rag.services.profiles import generation_provider  # noqa: PLC0415

    return generation_provider()


@route("GET")
def profiles(request: HttpRequest, request_id: str) -> dict:
    return scopes.profiles()


def _search(body, request_id: str, *, channel: Channel = Channel.CGRAG, arguments: dict | None = None
            ) -> tuple[SearchOutcome, dict, int]:
    topk = body.topk if body.topk is not None else _config()["DEFAULT_TOPK"]
    item = scopes.scope_activate(body.scope)
    outcome = question_search(_question(body.query, item["normalized_scope"], topk, request_id,
                                        arguments or {"scope": body.scope, "topk": body.topk}, channel))
    return outcome, item, topk


@route("POST")
def retrieve_rerank(request: HttpRequest, request_id: str) -> dict:
    body = parse(RetrieveRerankInput, request.body)
    outcome, item, topk = _search(body, request_id)
    return {"request_id": request_id, **retrieval_of(outcome, item, topk)}


@route("POST")
def constrained_generate(request: HttpRequest, request_id: str) -> dict:
    body = parse(ConstrainedGenerateInput, request.body)
    candidates = [Candidate(title=doc.law_name, article=doc.article_number, text=doc.contents,
                            chunk_id=doc.chunk_id, source=doc.source) for doc in body.retrieval_docs]
    max_items = body.max_items if body.max_items is not None else _config()["DEFAULT_MAX_ITEMS"]
    question = QuestionRequest(question=body.query, channel=Channel.CGRAG, caller=_caller(request_id, {
        "route": "constrained-generate", "max_items": body.max_items, "num_docs": len(candidates)}),
        capacity=CapacityGate())
    outcome = question_choose(question, candidates=candidates, max_items=max_items,
                              thinking=body.generation_enable_thinking)
    return {"request_id": request_id, **generation_of(outcome, include_debug=body.include_debug)}


def _rag_request(body: RagInput, request_id: str, route_name: str) -> tuple[QuestionRequest, dict, int, int]:
    topk = body.topk if body.topk is not None else _config()["DEFAULT_TOPK"]
    max_items = body.max_items if body.max_items is not None else _config()["DEFAULT_MAX_ITEMS"]
    item = scopes.scope_activate(body.scope)
    question = _question(body.query, item["normalized_scope"], topk, request_id,
                         {"route": route_name, "scope": body.scope, "topk": body.topk, "max_items": body.max_items})
    return question, item, topk, max_items


@route("POST")
def rag(request: HttpRequest, request_id: str) -> dict:
    body = parse(RagInput, request.body)
    question, item, topk, max_items = _rag_request(body, request_id, request.path.rsplit("/", 1)[-1])
    outcome = question_choose(question, max_items=max_items, thinking=body.generation_enable_thinking)
    return {"query": body.query, "request_id": request_id, "retrieval": retrieval_of(outcome.search, item, topk),
            "generation": generation_of(outcome, include_debug=body.include_debug)}


@route("POST")
def rag_stream(request: HttpRequest, request_id: str):
    body = parse(RagInput, request.body)
    question, item, topk, max_items = _rag_request(body, request_id, "rag/stream")

    def events(cancelled) -> Iterator[tuple[str, dict]]:
        tag = {"request_id": request_id}
        retrieval: dict = {}
        yield "progress", {"stage": "retrieval", "label": "正在检索", "status": "running", **tag}
        try:
            for event in question_choose_stream(question, max_items=max_items, thinking=body.generation_enable_thinking,
                                                token_delay=_config()["STREAM_TOKEN_DELAY"], cancelled=cancelled):
                if isinstance(event, RetrievalEvent):
                    retrieval = retrieval_of(event.search, item, topk)
                    yield "progress", {"stage": "retrieval", "label": "检索完成", "status": "done", **tag}
                    yield "retrieval", {**retrieval, **tag}
                elif isinstance(event, GenerationEvent):
                    yield "progress", {"stage": "generation", "label": "正在生成", "status": "running", **tag}
                elif isinstance(event, TokenEvent):
                    yield "token", {"channel": "answer", "text": event.text, **tag}
                elif isinstance(event, ChoiceEvent):
                    generation = generation_of(event.outcome, include_debug=body.include_debug)
                    if not generation["ok"]:
                        yield "error", {**generation["error"], **tag}
                    yield "progress", {"stage": "generation", "label": "生成完成", "status": "done", **tag}
                    yield "final", {"query": body.query, "retrieval": retrieval, "generation": generation, **tag}
        except Exception as exc:  # noqa: BLE001 - after the headers, every failure is an error then a final frame
            error = error_body(request_id, error_of(exc))["error"]
            yield "error", {**error, **tag}
            yield "final", {"query": body.query, "retrieval": retrieval,
                            "generation": {"ok": False, "error": error, "pred_indices": [], "pred_items": [],
                                           "pred_raw": ""}, **tag}

    return sse_response(request_id, events)


@route("POST")
def warmup(request: HttpRequest, request_id: str) -> dict:
    body = parse(WarmupInput, request.body)
    requested = body.scopes if body.scopes is not None else scopes.available_scopes()
    for n, name in enumerate(requested):  # every name is checked before anything loads
        try:
            scopes.scope_slug(name)
        except InvalidRequest as exc:
            exc.errors[0]["loc"] = ["scopes", str(n)]
            raise
    warmed = [scopes.scope_activate(name) for name in requested]
    return {"ok": all(item["warmed"] for item in warmed), "request_id": request_id, "requested_scopes": requested,
            "warmed_scopes": [item["requested_scope"] for item in warmed if item["warmed"]],
            "final_active_scope": scopes.active_scope(), "warmed": warmed}


# -- the legacy routes (FlashRAG and Search-R1 callers) --------------------------------------------------------


@route("GET")
def healthz(request: HttpRequest, request_id: str) -> dict:
    """Liveness, with the active profile's summary as the seed's /healthz; knowledge_bases_ready as before."""
    bases = scopes.knowledge_bases()
    active = scopes.active_scope()
    active_kb = next((kb for kb in bases if kb.slug == scopes.aliases().get(active, active)), None)
    return {"ok": True, "device": "cpu", "store_topk": _config()["DEFAULT_TOPK"],
            "available_scopes": scopes.available_scopes(bases), "default_scope": scopes.default_scope(),
            "active_scope": active,
            "retrieval_method": active_kb.active_version.model_id if active_kb and active_kb.active_version else "",
            "knowledge_bases_ready": sum(1 for kb in bases if kb.active_version is not None)}


class _Lenient:
    """A /retrieve body read the historical way: any types, defaults from the server's settings."""

    def __init__(self, raw: dict):
        query = raw.get("query")
        self.query = query.strip() if isinstance(query, str) else ""
        if not self.query:
            raise invalid("query", "query must be a non-empty string", "missing" if query is None else "string_type")
        scope = raw.get("scope")
        self.scope = str(scope) if scope not in (None, "") else None
        self.requested_scope = scope
        self.topk = _clamped(raw.get("topk"), _config()["DEFAULT_TOPK"])


def _clamped(value, default: int) -> int:
    try:
        number = int(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        number = default
    return max(1, min(200, number))


def _json_object(raw: bytes) -> dict:
    try:
        value = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise invalid("body", "The body must be a JSON object.", "json_invalid") from None
    if not isinstance(value, dict):
        raise invalid("body", "The body must be a JSON object.", "dict_type")
    return value


@route("POST")
def retrieve(request: HttpRequest, request_id: str) -> dict:
    raw = _json_object(request.body)
    if "queries" in raw:
        return _retrieve_batch(raw, request_id)
    body = _Lenient(raw)
    outcome, item, topk = _search(body, request_id, arguments={"route": "retrieve", "scope": body.requested_scope,
                                                               "topk": raw.get("topk")})
    shaped = retrieval_of(outcome, item, topk, with_cache=False)
    shaped["pipeline"]["requested_scope"] = body.requested_scope
    return {"request_id": request_id, **shaped}


def _retrieve_batch(raw: dict, request_id: str) -> dict:
    """Search-R1 / verl's retriever: {"queries": [...], "topk": N, "return_scores": bool} →
    {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}, contents being `"<title>"\\n<text>`."""
    queries = raw.get("queries")
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        raise invalid("queries", "queries must be a non-empty list of non-empty strings", "list_type")
    if len(queries) > 64:
        raise invalid("queries", "at most 64 queries per request", "too_long")
    topk = _clamped(raw.get("topk"), _config()["DEFAULT_TOPK"])
    scores = raw.get("return_scores") is True
    scope = raw.get("scope")
    item = scopes.scope_activate(str(scope) if scope not in (None, "") else None)
    result = []
    for query in queries:
        outcome = question_search(_question(query, item["normalized_scope"], topk, request_id,
                                            {"route": "retrieve", "batch": len(queries), "topk": raw.get("topk")},
                                            Channel.SEARCH_R1))
        documents = [{"document": {"id": hit.chunk.chunk_id, "contents": f'"{hit.chunk.title}"\n{hit.chunk.text}'},
                      "score": round(float(hit.score), 6)} for hit in outcome.candidates]
        result.append(documents if scores else [entry["document"] for entry in documents])
    return {"result": result}

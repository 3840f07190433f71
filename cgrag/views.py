"""The CG_RAG face (seed 004): parse the seed's request, call the one question service, shape the seed's reply.

Field names are the seed's and are never renamed: a candidate is `law_name` (the document title),
`article_number` (its heading path or member) and `contents` (the chunk text), with our own fields beside
them. Searches go through `question_search` with the retrieval cache and the capacity gate; constrained
generation through `question_choose` / `question_choose_stream`. Every request is one record (channel
`cgrag`, or `search_r1` for the batch form of /retrieve).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest

from cgrag import scopes
from cgrag.http import error_body, error_of, route, sse_response
from cgrag.inputs import (ConstrainedGenerateInput, InvalidRequest, RagInput, RetrieveRerankInput, WarmupInput, invalid,
                          json_object, parse)
from cgrag.limits import Spender
from cgrag.shapes import budgeted_docs, generation_of, retrieval_of
from cgrag.vision import vision_health
from infra.capacity import capacity_stats
from rag.models import Channel
from rag.retrieval_cache import retrieval_cache
from rag.services import (Caller, Candidate, ChoiceEvent, GenerationEvent, QuestionRequest, RetrievalEvent,
                          TokenEvent, question_choose, question_choose_stream, question_search)
from rag.services.budgets import DEFAULT_MAX_TOKENS, call_scope, evidence_within, start_of
from rag.services.profiles import embedding_summary, generation_provider, host_of, profile_of, rerank_summary

HTTP_PREFIX = "/cg-rag"
MCP_PATH = "/cg-rag/mcp"


def _config() -> dict:
    return settings.RAG_CGRAG


def _caller(request_id: str, arguments: dict) -> Caller:
    return Caller(transport="http", arguments={**arguments, "x_request_id": request_id})


def _question(query: str, slug: str, topk: int, request_id: str, arguments: dict, spender: Spender,
              channel: Channel = Channel.CGRAG) -> QuestionRequest:
    return QuestionRequest(question=query, channel=channel, kb=slug, candidates=topk, cache=True,
                           caller=_caller(request_id, arguments), capacity=spender.gate())


def _scoped_question(body, request_id: str, arguments: dict, spender: Spender, channel: Channel = Channel.CGRAG
                     ) -> tuple[QuestionRequest, dict, int]:
    """A search of the body's scope (made the active one) for its query, `topk` defaulting to settings:
    the question, the scope switch item and the topk asked."""
    topk = body.topk if body.topk is not None else _config()["DEFAULT_TOPK"]
    item = scopes.scope_activate(body.scope)
    return _question(body.query, item["normalized_scope"], topk, request_id, arguments, spender, channel), item, topk


# -- routes --------------------------------------------------------------------------------------------------


@route("GET")
def health(request: HttpRequest, request_id: str) -> dict:
    bases = scopes.knowledge_bases()
    active, active_kb = scopes.active_scope(), scopes.active_knowledge_base(bases)
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
    sdks = {kb.sdk_id for kb in bases if kb.sdk_id is not None}  # an SDK is read through its versions' indexes
    issues += [{"code": "scope_not_ready", "message": f"Scope {kb.slug!r} has no active index version yet."}
               for kb in bases if kb.active_version is None and kb.pk not in sdks]
    rerank = rerank_summary()
    return {
        "ok": True, "request_id": request_id, "service": "CG_RAG", "http_prefix": HTTP_PREFIX, "mcp_path": MCP_PATH,
        "available_scopes": scopes.available_scopes(bases), "default_scope": scopes.default_scope(),
        "active_scope": active, "config_issues": issues,
        "generation": {
            "configured": bool(generation_url and engine["GENERATION_MODEL"]),
            "provider": generation_provider(),
            "endpoint_configured": bool(generation_url),
            "endpoint_host": host_of(generation_url),
            "model": engine["GENERATION_MODEL"], "response_format_json": True,
            "enable_thinking": engine["GENERATION_THINKING"], "streaming": True,
            "stream_answer_token_delay_seconds": config["STREAM_TOKEN_DELAY"],
            "timeout_seconds": float(engine["GENERATION_READ_TIMEOUT"]),
            "max_context_docs": config["DEFAULT_TOPK"], "default_max_items": config["DEFAULT_MAX_ITEMS"],
        },
        "vision": vision_health(),
        "rerank": {"api_enabled": bool(engine["RERANK_BASE_URL"]), "model": rerank["model"], "backend": rerank["backend"]},
        "retriever": scopes.retriever_state(bases),
        "profile_fingerprint": {"id": profile.id, "summary": profile.summary} if profile else
        {"id": "", "summary": {"scope": active, "embedding_api": embedding_summary(None), "rerank": rerank}},
        "retrieve_cache": retrieval_cache().stats(),
        "capacity": capacity_stats(),
    }


@route("GET")
def profiles(request: HttpRequest, request_id: str) -> dict:
    return scopes.profiles()


@route("POST", limit="search")
def retrieve_rerank(request: HttpRequest, request_id: str) -> dict:
    body = parse(RetrieveRerankInput, request.body)
    arguments = {"scope": body.scope, "topk": body.topk, **({"max_tokens": body.max_tokens, "cursor": body.cursor}
                                                            if body.max_tokens or body.cursor else {})}
    budget = None
    if body.max_tokens is not None or body.cursor is not None:  # checked before the question is asked
        scope = call_scope(question=body.query, kb=body.scope, sdk_version=None)
        budget = (body.max_tokens or DEFAULT_MAX_TOKENS, start_of(body.cursor, scope), scope)
    question, item, topk = _scoped_question(body, request_id, arguments, Spender.of_request(request))
    outcome = question_search(question)
    shaped = retrieval_of(outcome, item, topk)
    if budget is not None:
        max_tokens, start, scope = budget
        packed, following = evidence_within(outcome, max_tokens=max_tokens, start=start, scope=scope)
        shaped.update(budgeted_docs(outcome, packed), tokens=packed.tokens, max_tokens=max_tokens,
                      left_out=list(packed.left_out), cursor=following)
    return {"request_id": request_id, **shaped}


@route("POST", limit="generate")
def constrained_generate(request: HttpRequest, request_id: str) -> dict:
    body = parse(ConstrainedGenerateInput, request.body)
    spender = Spender.of_request(request)
    candidates = [Candidate(title=doc.law_name, article=doc.article_number, text=doc.contents,
                            chunk_id=doc.chunk_id, source=doc.source) for doc in body.retrieval_docs]
    max_items = body.max_items if body.max_items is not None else _config()["DEFAULT_MAX_ITEMS"]
    question = QuestionRequest(question=body.query, channel=Channel.CGRAG, caller=_caller(request_id, {
        "route": "constrained-generate", "max_items": body.max_items, "num_docs": len(candidates)}),
        capacity=spender.gate())
    outcome = question_choose(question, candidates=candidates, max_items=max_items,
                              thinking=body.generation_enable_thinking)
    spender.settle(outcome.usage, answered=outcome.choice is not None)
    return {"request_id": request_id, **generation_of(outcome, include_debug=body.include_debug)}


def _rag_request(body: RagInput, request_id: str, route_name: str, spender: Spender
                 ) -> tuple[QuestionRequest, dict, int, int]:
    max_items = body.max_items if body.max_items is not None else _config()["DEFAULT_MAX_ITEMS"]
    question, item, topk = _scoped_question(body, request_id, {"route": route_name, "scope": body.scope,
                                                                "topk": body.topk, "max_items": body.max_items},
                                            spender)
    return question, item, topk, max_items


@route("POST", limit="generate")
def rag(request: HttpRequest, request_id: str) -> dict:
    body = parse(RagInput, request.body)
    spender = Spender.of_request(request)
    question, item, topk, max_items = _rag_request(body, request_id, request.path.rsplit("/", 1)[-1], spender)
    outcome = question_choose(question, max_items=max_items, thinking=body.generation_enable_thinking)
    spender.settle(outcome.usage, answered=outcome.choice is not None)
    return {"query": body.query, "request_id": request_id, "retrieval": retrieval_of(outcome.search, item, topk),
            "generation": generation_of(outcome, include_debug=body.include_debug)}


def _failed_final(query: str, retrieval: dict, error: dict, request_id: str) -> dict:
    """rag/stream's final body after an error: the retrieval so far, and the generation's failure."""
    return {"query": query, "retrieval": retrieval,
            "generation": {"ok": False, "error": error, "pred_indices": [], "pred_items": [], "pred_raw": ""},
            "request_id": request_id}


@route("POST", limit="generate")
def rag_stream(request: HttpRequest, request_id: str):
    body = parse(RagInput, request.body)
    spender = Spender.of_request(request)
    question, item, topk, max_items = _rag_request(body, request_id, "rag/stream", spender)
    sent = {"retrieval": {}}  # the retrieval once sent, also for a final the face writes (deadline, server stopping)

    def events(cancelled) -> Iterator[tuple[str, dict]]:
        tag = {"request_id": request_id}
        retrieval: dict = {}
        yield "progress", {"stage": "retrieval", "label": "正在检索", "status": "running", **tag}
        try:
            for event in question_choose_stream(question, max_items=max_items, thinking=body.generation_enable_thinking,
                                                token_delay=_config()["STREAM_TOKEN_DELAY"], cancelled=cancelled):
                if isinstance(event, RetrievalEvent):
                    retrieval = sent["retrieval"] = retrieval_of(event.search, item, topk)
                    yield "progress", {"stage": "retrieval", "label": "检索完成", "status": "done", **tag}
                    yield "retrieval", {**retrieval, **tag}
                elif isinstance(event, GenerationEvent):
                    yield "progress", {"stage": "generation", "label": "正在生成", "status": "running", **tag}
                elif isinstance(event, TokenEvent):
                    yield "token", {"channel": "answer", "text": event.text, **tag}
                elif isinstance(event, ChoiceEvent):
                    spender.settle(event.outcome.usage, answered=event.outcome.choice is not None)
                    generation = generation_of(event.outcome, include_debug=body.include_debug)
                    if not generation["ok"]:
                        yield "error", {**generation["error"], **tag}
                    yield "progress", {"stage": "generation", "label": "生成完成", "status": "done", **tag}
                    yield "final", {"query": body.query, "retrieval": retrieval, "generation": generation, **tag}
        except Exception as exc:  # noqa: BLE001 - after the headers, every failure is an error then a final frame
            spender.give_back(exc)
            error = error_body(request_id, error_of(exc))["error"]
            yield "error", {**error, **tag}
            yield "final", _failed_final(body.query, retrieval, error, request_id)

    return sse_response(request_id, events,
                        lambda error: _failed_final(body.query, sent["retrieval"], error, request_id))


@route("POST", limit="search")
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
    """Liveness, with the active profile's summary as the seed's /healthz; knowledge_bases_ready as before.
    The process answers, so it is alive: without its database it still says ok, only without the summary (a
    load balancer must not restart every process for a database outage; /readyz tells that one)."""
    alive = {"ok": True, "device": "cpu", "store_topk": _config()["DEFAULT_TOPK"]}
    try:
        bases = scopes.knowledge_bases()
    except DatabaseError:
        return {**alive, "summary": "unavailable: the database does not answer"}
    active_kb = scopes.active_knowledge_base(bases)
    return {**alive,
            "available_scopes": scopes.available_scopes(bases), "default_scope": scopes.default_scope(),
            "active_scope": scopes.active_scope(),
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


@route("POST")
def retrieve(request: HttpRequest, request_id: str) -> dict:
    raw = json_object(request.body)
    spender = Spender.of_request(request)
    if "queries" in raw:
        return _retrieve_batch(raw, request_id, spender)
    body = _Lenient(raw)
    spender.count("cgrag_search")
    question, item, topk = _scoped_question(body, request_id, {"route": "retrieve", "scope": body.requested_scope,
                                                               "topk": raw.get("topk")}, spender)
    outcome = question_search(question)
    shaped = retrieval_of(outcome, item, topk, with_cache=False)
    shaped["pipeline"]["requested_scope"] = body.requested_scope
    return {"request_id": request_id, **shaped}


def _retrieve_batch(raw: dict, request_id: str, spender: Spender) -> dict:
    """Search-R1 / verl's retriever: {"queries": [...], "topk": N, "return_scores": bool} →
    {"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}, contents being `"<title>"\\n<text>`.
    Each query counts against the client's search limit, all of them before the first search."""
    queries = raw.get("queries")
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        raise invalid("queries", "queries must be a non-empty list of non-empty strings", "list_type")
    if len(queries) > 64:
        raise invalid("queries", "at most 64 queries per request", "too_long")
    spender.count("cgrag_search", len(queries))
    topk = _clamped(raw.get("topk"), _config()["DEFAULT_TOPK"])
    scores = raw.get("return_scores") is True
    scope = raw.get("scope")
    item = scopes.scope_activate(str(scope) if scope not in (None, "") else None)
    result = []
    for query in queries:
        outcome = question_search(_question(query, item["normalized_scope"], topk, request_id,
                                            {"route": "retrieve", "batch": len(queries), "topk": raw.get("topk")},
                                            spender, Channel.SEARCH_R1))
        documents = [{"document": {"id": hit.chunk.chunk_id, "contents": f'"{hit.chunk.title}"\n{hit.chunk.text}'},
                      "score": round(float(hit.score), 6)} for hit in outcome.candidates]
        result.append(documents if scores else [entry["document"] for entry in documents])
    return {"result": result}

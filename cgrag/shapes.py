"""The CG_RAG face's reply shapes (seed 004): the question service's outcomes in the seed's field names.

A candidate is `law_name` (the document title), `article_number` (its heading path or member) and `contents`
(the chunk text), with our own fields beside them; they are never renamed. The vision routes shape their
references with `doc_of` too.
"""

from __future__ import annotations

from django.conf import settings

from rag.retrieval_cache import retrieval_cache
from rag.services import ChoiceOutcome, SearchOutcome, candidate_of


def doc_of(hit, rank: int) -> dict:
    """A candidate in the seed's names, then ours."""
    candidate, chunk = candidate_of(hit), hit.chunk
    return {"law_name": candidate.title, "article_number": candidate.article, "contents": candidate.text,
            "chunk_id": chunk.chunk_id, "source": chunk.source, "class_name": chunk.class_name,
            "member": chunk.member, "rank": rank, "score": round(float(hit.score), 6), "score_source": hit.source}


def budgeted_docs(outcome: SearchOutcome, packed) -> dict:
    """retrieval_docs within a token budget: each packed candidate with its contents as packed (cut at block and
    sentence boundaries), whether it is complete and the code blocks it left out; ranks go on across a cursor."""
    ranked = {h.chunk.chunk_id: (rank, h) for rank, h in enumerate(outcome.candidates or outcome.result.hits, start=1)}
    docs = []
    for piece in packed.items:
        rank, hit = ranked[piece.chunk_id]
        doc = doc_of(hit, rank)
        docs.append({**doc, "contents": piece.text, "complete": piece.complete,
                     "dropped_code_blocks": list(piece.dropped_code)})
    return {"retrieval_docs": docs, "num_docs": len(docs)}


def pipeline_of(outcome: SearchOutcome, item: dict, *, cached: bool = False) -> dict:
    result = outcome.result
    timings = result.timings_ms
    rerank_ms = 0.0 if cached else round(float(timings.get("rerank", 0.0)), 3)
    total_ms = round(outcome.latency_ms if cached else float(timings.get("total", outcome.latency_ms)), 3)
    pipeline = {
        "requested_scope": item["requested_scope"], "active_scope": item["active_scope"],
        "scope_switched": item["scope_switched"], "profile_fingerprint": outcome.profile.id if outcome.profile else "",
        "index_version": outcome.version, "index_built_at": outcome.built_at, "source_revision": outcome.source_revision,
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

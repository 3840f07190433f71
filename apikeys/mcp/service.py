"""What the MCP tools do, whatever the transport: search or answer through the shared engine, record the
request (channel `mcp`) and add the call's tokens to its key's usage. Plain synchronous functions."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings

from apikeys.services import api_key_usage_settle
from rag import live
from rag.errors import ServiceError
from rag.services import (
    MAX_QUESTION_CHARS,
    answer_question,
    index_version_built_at,
    new_request_id,
    request_record_write,
    search,
)
from rag.shapes import citation_as_dict, hit_as_dict

CHANNEL = "mcp"
MAX_EXCLUDE = 100
INTERNAL = ServiceError("internal_error", "The call failed on the server.", status=500)


@dataclass(frozen=True)
class Caller:
    """Who is calling: the key (absent in debug mode and on stdio), the MCP session and the transport."""

    key_id: int | None = None
    key_prefix: str = ""
    session_id: str = ""
    transport: str = "stdio"


def tool_names() -> tuple[str, str]:
    """The deployment's tool names: search_<slug>_docs and ask_<slug>_docs."""
    slug = settings.RAG_PRODUCT_SLUG
    return f"search_{slug}_docs", f"ask_{slug}_docs"


def mcp_search(*, caller: Caller, question, top_k: int | None = None, kb: str | None = None) -> dict:
    """Search the documentation for one tool call; return the result as a plain dict (see `SearchOutput`)."""
    tool = tool_names()[0]
    kb = kb or settings.RAG_DEFAULT_KB
    arguments = {"question": question, "top_k": top_k, "kb": kb}
    request_id, started = new_request_id(), time.perf_counter()
    with _call("search", tool, caller, arguments, request_id, kb, question, started):
        _check_kb(kb)
        result = search(kb=kb, question=question, top_k=top_k)
    request_record_write(channel=CHANNEL, kind="search", request_id=request_id, kb=kb, question=question,
                         result=result, latency_ms=(time.perf_counter() - started) * 1000,
                         caller=_caller_fields(caller, tool, arguments))
    if caller.key_id is not None:
        api_key_usage_settle(key_id=caller.key_id, tool=tool)
    return {
        "request_id": request_id,
        "question": question,
        **_provenance(kb, result.version),
        "plan": _plan_summary(result.plan),
        "results": [_chunk(hit, rank, kb, result.version) for rank, hit in enumerate(result.hits, start=1)],
    }


def mcp_ask(*, caller: Caller, question, exclude=(), kb: str | None = None) -> dict:
    """Answer a question from the documentation for one tool call (see `AskOutput`)."""
    tool = tool_names()[1]
    kb = kb or settings.RAG_DEFAULT_KB
    exclude = [] if exclude is None else exclude
    arguments = {"question": question, "exclude": exclude, "kb": kb}
    request_id, started = new_request_id(), time.perf_counter()
    with _call("chat", tool, caller, arguments, request_id, kb, question, started):
        _check_kb(kb)
        if (not isinstance(exclude, list) or len(exclude) > MAX_EXCLUDE
                or not all(isinstance(c, str) and 0 < len(c) <= 64 for c in exclude)):
            raise ServiceError("invalid_exclude", f"exclude must be a list of at most {MAX_EXCLUDE} chunk ids.")
        outcome = answer_question(kb=kb, question=question, exclude=exclude)
    answer = outcome.answer
    request_record_write(channel=CHANNEL, kind="chat", request_id=request_id, kb=kb, question=question,
                         result=outcome.search, answer=answer, generate_ms=outcome.generate_ms,
                         latency_ms=(time.perf_counter() - started) * 1000,
                         caller=_caller_fields(caller, tool, arguments))
    if caller.key_id is not None:
        api_key_usage_settle(key_id=caller.key_id, tool=tool, prompt_tokens=answer.usage.prompt_tokens,
                             completion_tokens=answer.usage.completion_tokens)
    hits = {h.chunk.chunk_id: h for h in outcome.search.hits}
    citations = []
    for citation in answer.citations:
        item = citation_as_dict(citation)
        hit = hits.get(citation.chunk_id)
        item.update(class_name=hit.chunk.class_name if hit else "", member=hit.chunk.member if hit else "",
                    text=hit.chunk.text if hit else "")
        citations.append(item)
    return {
        "request_id": request_id,
        "question": question,
        **_provenance(kb, outcome.search.version),
        "answer": answer.text,
        "confidence": answer.confidence,
        "degraded": answer.degraded,
        "mode": answer.mode,
        "reason": answer.reason,
        "citations": citations,
        "evidence": [h.chunk.chunk_id for h in outcome.search.hits],
        "usage": {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.completion_tokens},
    }


@contextmanager
def _call(kind, tool, caller, arguments, request_id, kb, question, started):
    """Count the call as in flight; a failure of any kind is recorded (and settled on the key), then raised."""
    with live.in_flight(CHANNEL):
        try:
            yield
        except ServiceError as exc:
            _record_failure(kind, tool, caller, arguments, request_id, kb, question, exc, started)
            raise
        except Exception:
            _record_failure(kind, tool, caller, arguments, request_id, kb, question, INTERNAL, started)
            raise


def _check_kb(kb) -> None:
    if not isinstance(kb, str) or len(kb) > 64:
        raise ServiceError("invalid_kb", "kb must be the slug of a knowledge base.")


def _provenance(kb: str, version: str) -> dict:
    return {"kb": kb, "index_version": version, "index_built_at": index_version_built_at(kb=kb, version=version)}


def _plan_summary(plan) -> dict:
    return {"kind": plan.kind, "classes": list(plan.classes or plan.hinted_classes), "members": list(plan.members),
            "corrections": [{"from": a, "to": b} for a, b in plan.corrections], "reason": plan.reason}


def _chunk(hit, rank: int, kb: str, version: str) -> dict:
    shaped = hit_as_dict(hit, kb=kb, version=version)
    return {"rank": rank, "chunk_id": shaped["chunk_id"], "source": shaped["source"], "title": shaped["title"],
            "heading_path": shaped["heading_path"], "class_name": shaped["class_name"], "member": shaped["member"],
            "score": shaped["score"], "text": shaped["content"]}


def _caller_fields(caller: Caller, tool: str, arguments: dict) -> dict:
    arguments = {k: v[:MAX_QUESTION_CHARS] if isinstance(v, str) else v for k, v in arguments.items()}
    if len(str(arguments)) > 4 * MAX_QUESTION_CHARS:  # a huge argument of another type: keep its kind only
        arguments = {k: v if len(str(v)) <= MAX_QUESTION_CHARS else f"<{type(v).__name__}, too long>"
                     for k, v in arguments.items()}
    return {"api_key_prefix": caller.key_prefix, "tool": tool, "arguments": arguments,
            "session_id": caller.session_id[:64], "transport": caller.transport}


def _record_failure(kind, tool, caller, arguments, request_id, kb, question, exc: ServiceError, started) -> None:
    request_record_write(channel=CHANNEL, kind=kind, request_id=request_id, kb=kb[:64] if isinstance(kb, str) else "",
                         question=question if isinstance(question, str) else "", error_code=exc.code,
                         latency_ms=(time.perf_counter() - started) * 1000,
                         caller=_caller_fields(caller, tool, arguments))
    if caller.key_id is not None:
        api_key_usage_settle(key_id=caller.key_id, tool=tool, failed=True)


def mcp_refusal_record(*, caller: Caller, tool: str, arguments: dict, error: ServiceError) -> None:
    """Record a call refused before it ran (rate limit, quota), so every call leaves a trace."""
    question = arguments.get("question") if isinstance(arguments, dict) else ""
    kb = arguments.get("kb") if isinstance(arguments, dict) and isinstance(arguments.get("kb"), str) else ""
    request_record_write(channel=CHANNEL, kind="chat" if tool.startswith("ask_") else "search",
                         request_id=new_request_id(), kb=kb or settings.RAG_DEFAULT_KB,
                         question=question[:MAX_QUESTION_CHARS] if isinstance(question, str) else "",
                         error_code=error.code,
                         caller=_caller_fields(caller, tool, arguments if isinstance(arguments, dict) else {}))

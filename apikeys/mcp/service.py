"""What the MCP tools do, whatever the transport: ask through the one question path (channel `mcp`), shape
the result for the tools, and settle the call the HTTP gate admitted on the caller's key (apikeys.services:
`KeyCall.settling`, the same as every face that takes keys). Plain synchronous functions."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

from django.conf import settings

from apikeys.services import KeyCall
from infra.errors import ServiceError
from rag.models import Channel, RequestRecord
from rag.services import LIMITS
from rag.services.questions import Caller, QuestionRequest, question_answer, question_refused, question_search
from rag.services.budgets import (PAGED_CANDIDATES, Position, call_scope, checked_max_tokens, citations_within,
                                  evidence_within, page_within, start_of)
from rag.services.sdk import sdk_versions_listed
from rag.shapes import cited_chunks, hit_as_dict, sdk_version_as_dict

__all__ = ["Caller", "counted_tool_names", "mcp_ask", "mcp_list_versions", "mcp_read", "mcp_refusal_record",
           "mcp_search", "read_tool_name", "tool_names", "versions_tool_name"]


def tool_names() -> tuple[str, str]:
    """The deployment's question tools: search_<slug>_docs and ask_<slug>_docs."""
    slug = settings.RAG_PRODUCT_SLUG
    return f"search_{slug}_docs", f"ask_{slug}_docs"


def versions_tool_name() -> str:
    return f"list_{settings.RAG_PRODUCT_SLUG}_versions"


def read_tool_name() -> str:
    return f"read_{settings.RAG_PRODUCT_SLUG}_docs"


def counted_tool_names() -> tuple[str, ...]:
    """Every tool whose calls count against a key's rate limit and quota."""
    return (*tool_names(), versions_tool_name(), read_tool_name())


def _request(caller: Caller, tool: str, arguments: dict, **fields) -> QuestionRequest:
    return QuestionRequest(channel=Channel.MCP, caller=Caller(
        key_id=caller.key_id, key_prefix=caller.key_prefix, tool=tool, arguments=arguments,
        session_id=caller.session_id, transport=caller.transport), **fields)


def _settling(key_call: KeyCall | None):
    return key_call.settling() if key_call is not None else nullcontext()


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    return isinstance(value, list | tuple) and any(_holds_nul(item) for item in value)


def _refuse_nul(request: QuestionRequest, kind: str) -> None:
    """Refuse (and record) a call with a NUL in an argument, with that argument's code: no slug or chunk id holds
    one, and PostgreSQL stores none in text or JSON, so the question service must not look one up."""
    for name, value in request.caller.arguments.items():
        if _holds_nul(value):
            error = ServiceError(f"invalid_{name}", f"{name} must not contain NUL characters.")
            question_refused(request, kind=kind, error=error)
            raise error


def _arguments(arguments: dict, **optional) -> dict:
    """A call's arguments as recorded (a replay asks the same): the optional ones only when they were given."""
    return {**arguments, **{name: value for name, value in optional.items() if value is not None}}


def _slug(kb) -> str:
    """The knowledge base a non-question tool reads (a question's is checked by the question service)."""
    slug = kb if kb is not None else settings.RAG_DEFAULT_KB
    if not isinstance(slug, str) or "\x00" in slug or len(slug) > LIMITS.kb_chars:
        raise ServiceError("invalid_kb", "kb must be the slug of a knowledge base.")
    return slug


def _one_version(request: QuestionRequest, kind: str, version) -> QuestionRequest:
    """`version` is another name of `sdk_version`, never ignored; two different ones are refused (and recorded)."""
    if version is None:
        return request
    if request.sdk_version is not None and request.sdk_version != version:
        error = ServiceError("invalid_sdk_version", "version and sdk_version name different versions.")
        question_refused(request, kind=kind, error=error)
        raise error
    return replace(request, sdk_version=version)


def _budget(request: QuestionRequest, kind: str, max_tokens, cursor) -> tuple[int, Position, str]:
    """The call's budget and where its response starts (the top, or its cursor): checked before the question is
    asked, a bad one refused and recorded like any bad argument."""
    scope = call_scope(question=request.question, kb=request.kb, sdk_version=request.sdk_version)
    try:
        return checked_max_tokens(max_tokens), start_of(cursor, scope), scope
    except ServiceError as error:
        question_refused(request, kind=kind, error=error)
        raise


def mcp_search(*, caller: Caller, question, top_k=None, kb=None, sdk_version=None, version=None, max_tokens=None,
               cursor=None, key_call: KeyCall | None = None) -> dict:
    """Search the documentation for one tool call, within a token budget; return the result as a plain dict (see
    `SearchOutput`). At most `top_k` sections a response; `cursor` continues with the next ones."""
    tool = tool_names()[0]
    arguments = _arguments({"question": question, "top_k": top_k, "kb": kb or settings.RAG_DEFAULT_KB},
                           sdk_version=sdk_version, version=version, max_tokens=max_tokens, cursor=cursor)
    with _settling(key_call):
        request = _request(caller, tool, arguments, question=question, top_k=top_k, kb=kb, sdk_version=sdk_version,
                           candidates=PAGED_CANDIDATES, cache=True)
        _refuse_nul(request, RequestRecord.Kind.SEARCH)
        request = _one_version(request, RequestRecord.Kind.SEARCH, version)
        budget, start, scope = _budget(request, RequestRecord.Kind.SEARCH, max_tokens, cursor)
        outcome = question_search(request)
    per_response = top_k if type(top_k) is int else len(outcome.result.hits) or 5
    packed, following = evidence_within(outcome, max_tokens=budget, start=start, scope=scope,
                                        per_response=per_response)
    hits = {hit.chunk.chunk_id: hit for hit in (*outcome.candidates, *outcome.result.hits)}
    return {
        "request_id": outcome.request_id,
        "question": question,
        **_provenance(outcome),
        "plan": _plan_summary(outcome.result.plan),
        "results": [{**_chunk(hits[piece.chunk_id], piece.item + 1, outcome), "text": piece.text,
                     "complete": piece.complete, "dropped_code_blocks": list(piece.dropped_code)}
                    for piece in packed.items],
        "tokens": packed.tokens, "max_tokens": budget, "left_out": list(packed.left_out), "cursor": following,
    }


def mcp_ask(*, caller: Caller, question, exclude=None, kb=None, sdk_version=None, version=None, max_tokens=None,
            key_call: KeyCall | None = None) -> dict:
    """Answer a question from the documentation for one tool call (see `AskOutput`): the answer, and its cited
    sections within what `max_tokens` leaves (the read tool reads any of them whole)."""
    tool = tool_names()[1]
    exclude = [] if exclude is None else exclude
    arguments = _arguments({"question": question, "exclude": exclude, "kb": kb or settings.RAG_DEFAULT_KB},
                           sdk_version=sdk_version, version=version, max_tokens=max_tokens)
    with _settling(key_call) as call:
        request = _request(caller, tool, arguments, question=question, exclude=exclude, kb=kb,
                           sdk_version=sdk_version)
        _refuse_nul(request, RequestRecord.Kind.CHAT)
        request = _one_version(request, RequestRecord.Kind.CHAT, version)
        budget = _budget(request, RequestRecord.Kind.CHAT, max_tokens, None)[0]
        outcome = question_answer(request)
        if call is not None:
            call.spent(outcome.answer.usage)
    answer = outcome.answer
    citations, tokens = citations_within(answer.text, cited_chunks(outcome), max_tokens=budget)
    return {
        "request_id": outcome.request_id,
        "question": question,
        **_provenance(outcome),
        "answer": answer.text,
        "confidence": answer.confidence,
        "degraded": answer.degraded,
        "mode": answer.mode,
        "reason": answer.reason,
        "citations": citations,
        "tokens": tokens, "max_tokens": budget,
        "evidence": [h.chunk.chunk_id for h in outcome.result.hits],
        "usage": {"prompt_tokens": answer.usage.prompt_tokens, "completion_tokens": answer.usage.completion_tokens},
    }


def mcp_refusal_record(*, caller: Caller, tool: str, arguments: dict, error: ServiceError) -> None:
    """Record a call the gate refused before it ran (rate limit, quota), so every call leaves a trace."""
    arguments = arguments if isinstance(arguments, dict) else {}
    kind = RequestRecord.Kind.CHAT if tool.startswith("ask_") else RequestRecord.Kind.SEARCH
    kb = arguments.get("kb")
    question_refused(_request(caller, tool, arguments, question=arguments.get("question"),
                              kb=kb if isinstance(kb, str) else None), kind=kind, error=error)


def mcp_list_versions(*, kb=None, key_call: KeyCall | None = None) -> dict:
    """The SDK versions a knowledge base holds, for the list-versions tool (see `VersionsOutput`)."""
    with _settling(key_call):
        return sdk_versions_listed(_slug(kb))


def mcp_read(*, source, kb=None, sdk_version=None, max_tokens=None, cursor=None,
             key_call: KeyCall | None = None) -> dict:
    """A page or one section (`page#anchor`, as a result's `link` gives it) within a budget, for the read tool."""
    with _settling(key_call):
        return page_within(kb=_slug(kb), source=source, sdk_version=sdk_version, max_tokens=max_tokens, cursor=cursor)


def _provenance(outcome) -> dict:
    return {"kb": outcome.kb, "index_version": outcome.version, "index_built_at": outcome.built_at,
            "source_revision": outcome.source_revision, **sdk_version_as_dict(outcome)}


def _plan_summary(plan) -> dict:
    return {"kind": plan.kind, "classes": list(plan.classes or plan.hinted_classes), "members": list(plan.members),
            "corrections": [{"from": a, "to": b} for a, b in plan.corrections], "reason": plan.reason}


def _chunk(hit, rank: int, outcome) -> dict:
    shaped = hit_as_dict(hit, kb=outcome.kb, version=outcome.version)
    return {"rank": rank, "chunk_id": shaped["chunk_id"], "source": shaped["source"], "title": shaped["title"],
            "heading_path": shaped["heading_path"], "class_name": shaped["class_name"], "member": shaped["member"],
            "link": shaped["link"], "score": shaped["score"], "text": shaped["content"]}

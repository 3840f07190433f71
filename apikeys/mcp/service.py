"""What the MCP tools do, whatever the transport: ask through the one question path (channel `mcp`), shape
the result for the tools, and settle the call the HTTP gate admitted on the caller's key (apikeys.services:
`KeyCall.settling`, the same as every face that takes keys). Plain synchronous functions."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

from django.conf import settings
from django.db.models import Count

from apikeys.services import KeyCall
from infra.errors import ServiceError
from rag.models import Channel, Document, KnowledgeBase, RequestRecord
from rag.services import LIMITS, Caller, QuestionRequest, question_answer, question_refused, question_search
from rag.services.budgets import (MAX_RESPONSE_TOKENS, PAGED_CANDIDATES, Position, call_scope, checked_max_tokens,
                                  citations_within, evidence_within, page_within, start_of)
from rag.services.sdk import kb_serving, sdk_versions_diff, sdk_versions_listed, split_kb
from rag.shapes import cited_chunks, hit_as_dict, sdk_version_as_dict

__all__ = ["Caller", "counted_tool_names", "mcp_ask", "mcp_knowledge_bases", "mcp_list_versions", "mcp_page",
           "mcp_pages", "mcp_read", "mcp_refusal_record", "mcp_search", "page_uri", "prompt_explain_api",
           "prompt_migrate", "read_tool_name", "tool_names", "versions_tool_name"]


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


# -- resources and prompts (MCP's other two primitives: read by the client, never counted as tool calls) -------

RESOURCE_SCHEME = "docs"


def page_uri(kb: str, path: str) -> str:
    return f"{RESOURCE_SCHEME}://{kb}/pages/{path}"


def mcp_knowledge_bases() -> dict:
    """Every knowledge base a client may ask (an SDK's versions under it), with its active index and pages."""
    bases = []
    rows = (KnowledgeBase.objects.filter(sdk__isnull=True).select_related("active_version")
            .annotate(pages=Count("documents")).order_by("slug"))
    for row in rows:
        versions = sdk_versions_listed(row.slug)
        bases.append({"kb": row.slug, "name": row.name or row.slug, "language": row.language,
                      "index_version": row.active_version.name if row.active_version else None,
                      "index_built_at": row.active_version.built_at.isoformat()
                      if row.active_version and row.active_version.built_at else None,
                      "pages": row.pages, "pages_uri": f"{RESOURCE_SCHEME}://{row.slug}/pages",
                      "sdk_versions": [v["version"] for v in versions["versions"]],
                      "default_sdk_version": versions["default"]})
    return {"knowledge_bases": bases}


def mcp_pages(kb) -> dict:
    """The pages of a knowledge base (of an SDK: its `latest`), each with its resource URI."""
    served = kb_serving(_slug(kb), None)
    rows = Document.objects.filter(kb__slug=served.kb).order_by("path").values("path", "title")
    return {"kb": served.kb, "sdk_version": served.sdk_version or None,
            "pages": [{"path": r["path"], "title": r["title"], "uri": page_uri(served.kb, r["path"])} for r in rows]}


def mcp_page(kb, path) -> str:
    """A page's Markdown as a resource: at most MAX_RESPONSE_TOKENS; a longer page says how to read on."""
    data = page_within(kb=_slug(kb), source=path, max_tokens=MAX_RESPONSE_TOKENS)
    if data["cursor"]:
        return (data["text"] + f"\n\n(The first {data['tokens']} tokens of this page; {read_tool_name()} with source "
                f"{path!r}, kb {data['kb']!r} and cursor {data['cursor']!r} reads on.)")
    return data["text"]


def prompt_explain_api(name: str, kb=None) -> str:
    """The "explain this API" prompt: how to look the name up with the tools and what to answer with."""
    search = tool_names()[0]
    slug = _slug(kb)
    return (f"Explain the API `{name}` of {settings.RAG_PRODUCT_NAME} (knowledge base {slug}) from its official "
            f"documentation only. First call {search} with the question \"{name}\" (kb {slug!r}); if the results "
            f"are cut, call {read_tool_name()} with a result's `link`. Then explain: what it is and what it is for, "
            f"its signature (parameters, their types and defaults, the return value), what it inherits, and a short "
            f"example in the documentation's language. Cite each fact as [chunk_id] from the results, and say "
            f"plainly when the documentation does not state something rather than guessing.")


def prompt_migrate(older: str, newer: str, kb=None) -> str:
    """The "migrate from version A to B" prompt, holding what the documentation says changed between them."""
    slug = _slug(kb)
    diff = sdk_versions_diff(slug, older, newer)
    changes = diff.as_dict()
    lines = [f"Help me migrate code from {settings.RAG_PRODUCT_NAME} {diff.older} to {diff.newer} (knowledge base "
             f"{split_kb(slug)[0]}). The API reference of the two versions differs as follows:"]
    for label, key in (("Classes added", "classes_added"), ("Classes removed", "classes_removed")):
        if changes[key]:
            lines.append(f"- {label}: {', '.join(changes[key])}")
    lines += [f"- Class renamed: {old} -> {new}" for old, new in changes["classes_renamed"]]
    for key, label in (("removed", "Removed"), ("renamed", "Renamed"), ("signature_changed", "Signature changed"),
                       ("added", "Added")):
        for item in changes.get(key) or []:
            lines.append(f"- {label}: {_change_text(item)}")
    if len(lines) == 1:
        lines.append("- No class or member was added, removed, renamed or re-signed.")
    search = tool_names()[0]
    lines.append(f"For each removed, renamed or re-signed API my code uses, look up its replacement with {search} "
                 f"(sdk_version {diff.newer!r}) and show the change to make, citing the chunk ids; do not invent "
                 f"APIs the documentation of {diff.newer} does not have.")
    return "\n".join(lines)


def _change_text(item) -> str:
    """A change as as_dict gives it: a qualified name, an (old, new) pair, or a signature change."""
    if isinstance(item, dict):
        return f"{item['member']}: {item['before']} -> {item['after']}"
    if isinstance(item, (list, tuple)):
        return " -> ".join(str(x) for x in item)
    return str(item)


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

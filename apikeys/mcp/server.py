"""The MCP server (official SDK): the tools over the shared engine, resources (knowledge bases, their pages) and
prompt templates, the same for HTTP and stdio.

`build_server()` makes a fresh `MCPServer`; the HTTP gate (`apikeys.mcp.http`) serves it at /mcp inside the
Django ASGI application, and `manage.py mcp_stdio` runs it over stdin/stdout. The tools only translate:
arguments in, `apikeys.mcp.service` does the work, structured content plus a readable rendering out.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from apikeys.mcp.service import (RESOURCE_SCHEME, Caller, mcp_ask, mcp_knowledge_bases, mcp_list_versions, mcp_page,
                                 mcp_pages, mcp_read, mcp_search, prompt_explain_api, prompt_migrate, read_tool_name,
                                 tool_names, versions_tool_name)
from infra.errors import ServiceError
from rag.services import LIMITS
from rag.services.budgets import DEFAULT_MAX_TOKENS, MAX_TOKENS_LIMIT, MIN_BUDGET

SLUG_PATTERN = re.compile(r"[a-z0-9][a-z0-9_]{0,31}")
SCOPE_CALLER = "rag.mcp.caller"  # the HTTP gate puts the authenticated Caller in the ASGI scope under this key
# ... and the calls it admitted on the key (apikeys.services.KeyCall), by JSON-RPC id, under this one
SCOPE_KEY_CALLS = "rag.mcp.key_calls"
VERSION_HELP = ("The SDK version to read (`2.0`, `latest`, an alias), when the knowledge base holds several; default: "
                "latest. One that is not indexed fails with sdk_version_not_found naming those that are.")


class Chunk(BaseModel):
    rank: int
    chunk_id: str = Field(description="Stable id; pass it to the ask tool's `exclude` to leave this chunk out")
    source: str = Field(description="The document (path inside the knowledge base)")
    title: str
    heading_path: str
    class_name: str
    member: str
    link: str = Field(default="", description="The page and the generator's anchor of the section (api.html#click.echo)")
    score: float
    text: str
    complete: bool = Field(default=True, description="False when the budget cut the section (at a block or "
                                                     "sentence boundary)")
    dropped_code_blocks: list[str] = Field(default_factory=list, description="Code blocks left out whole because "
                                                                             "they did not fit (their first line)")


class Plan(BaseModel):
    kind: str = Field(description="doc, chitchat (not about the docs) or out_of_catalog (no such class)")
    classes: list[str]
    members: list[str]
    corrections: list[dict[str, str]]
    reason: str


class SearchOutput(BaseModel):
    request_id: str
    question: str
    kb: str = Field(description="Knowledge base searched")
    index_version: str = Field(description="Index version read")
    index_built_at: str | None = Field(description="When that version was built (ISO 8601)")
    source_revision: str = Field(default="", description="The git commit or website crawl the version was built "
                                                         "from; empty for a folder of the server")
    sdk_version: str | None = Field(default=None, description="The SDK version read; null for a knowledge base "
                                                              "without versions")
    version_notes: list[VersionNote] = Field(default_factory=list)
    plan: Plan
    results: list[Chunk]
    tokens: int = Field(default=0, description="Tokens this response's results hold (the bundled model's tokenizer)")
    max_tokens: int = Field(default=0, description="The budget they were packed into")
    left_out: list[str] = Field(default_factory=list, description="Ids of the ranked sections not in this response")
    cursor: str | None = Field(default=None, description="Pass it back to get the next sections; null when none "
                                                         "are left")


class VersionNote(BaseModel):
    """An API name the question writes that the version read does not document, and where it is documented."""

    name: str
    asked: str = Field(description="The SDK version asked about")
    kind: str = Field(description="added (in a later version), removed (only in earlier ones), or elsewhere")
    versions: list[str] = Field(description="The versions that document it, oldest first")
    since: str = Field(description="added: the first version with it; removed: the first version without it")
    replacement: str = Field(description="removed: what it was renamed to, when the versions' diff found it")
    documented_as: str = Field(description="Class.member in the nearest version that documents it")


class SdkVersion(BaseModel):
    version: str
    kb: str = Field(description="The version's own knowledge base (`slug@version`)")
    aliases: list[str]
    index_version: str | None
    built_at: str | None
    source_revision: str
    changes: dict[str, int] | None = Field(description="Classes and members added, removed, renamed and with a new "
                                                       "signature since the version before; null for the first")


class ReadOutput(BaseModel):
    kb: str = Field(description="The knowledge base read (`slug@version` for an SDK version)")
    sdk_version: str | None = None
    source: str = Field(description="The page, or `page#anchor` for one section, as asked")
    text: str = Field(description="The page's Markdown from the cursor on, within the budget")
    complete: bool = Field(description="True when this response holds the whole page or section")
    dropped_code_blocks: list[str] = Field(default_factory=list)
    tokens: int
    max_tokens: int
    cursor: str | None = Field(description="Pass it back to read on; null at the end")


class VersionsOutput(BaseModel):
    kb: str
    default: str | None = Field(description="The version read when none is asked (`latest`)")
    versions: list[SdkVersion] = Field(description="Oldest first; empty for a knowledge base without versions")


class Citation(BaseModel):
    number: int
    chunk_id: str
    source: str
    heading_path: str
    class_name: str
    member: str
    link: str = Field(default="", description="The page and the generator's anchor of the section (api.html#click.echo)")
    text: str
    sdk_version: str | None = Field(default=None, description="The SDK version the cited section belongs to")
    complete: bool = Field(default=True, description="False when the budget cut the cited text (read it whole with "
                                                     "the read tool and its link)")
    dropped_code_blocks: list[str] = Field(default_factory=list)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class AskOutput(BaseModel):
    request_id: str
    question: str
    kb: str
    index_version: str
    index_built_at: str | None
    source_revision: str = ""
    sdk_version: str | None = None
    version_notes: list[VersionNote] = Field(default_factory=list)
    answer: str
    confidence: str = Field(description="high, medium, low or none")
    degraded: bool = Field(description="True when the model was unavailable and the answer is extractive")
    mode: str = Field(description="llm, extractive, chitchat or empty")
    reason: str = Field(description="Why the answer is empty, insufficient or degraded; empty otherwise")
    citations: list[Citation]
    tokens: int = Field(default=0, description="Tokens the answer and its cited texts hold")
    max_tokens: int = Field(default=0, description="The budget they were packed into")
    evidence: list[str] = Field(description="Chunk ids the answer was allowed to use")
    usage: Usage


def _descriptions(product: str, search_name: str, ask_name: str) -> tuple[str, str]:
    search = (
        f"Search the official API reference of {product} and return the matching documentation chunks verbatim. "
        "Call this when you need exact signatures, parameters, defaults or a class's members to write or check "
        "code; name the class and member if you know them (e.g. 'PerspectiveCamera fov'). Chinese and English "
        "questions both work; misspelled class names are corrected. Returns ranked chunks with their document, "
        "heading path, class, member and text, plus the knowledge base, index version and its build time. "
        "An empty result means the docs do not cover it (or the class does not exist): say so instead of guessing. "
        f"Prefer {ask_name} for a written explanation."
    )
    ask = (
        f"Ask a question about {product}'s API and get a short answer written only from its documentation, with "
        "numbered citations ([1], [2]) that name the document and heading they come from, a confidence level "
        "and the evidence chunk ids. Call this for 'how do I…' or 'what does … do' questions; use "
        f"{search_name} when you need the raw reference text. Pass chunk ids in `exclude` to ask again without "
        "sources you found wrong. Confidence 'low' or 'none' means the docs do not settle it: tell the user "
        "rather than inventing an API."
    )
    return search, ask


def _caller(ctx: Context, transport: str) -> Caller:
    """The caller the HTTP gate authenticated for this request; on stdio, an anonymous local caller."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None)
    if scope is None:
        return Caller(transport=transport)
    caller = scope.get(SCOPE_CALLER) or Caller(transport="http")
    session_id = request.headers.get("mcp-session-id", "")
    return Caller(key_id=caller.key_id, key_prefix=caller.key_prefix, session_id=session_id, transport="http")


async def _run(function, ctx: Context, **kwargs) -> dict:
    """Run a blocking service call in a worker thread (with Django's connection hygiene), with the call the HTTP
    gate admitted on the caller's key (None on stdio or without a key), which the service settles; service errors
    become MCP tool errors, which the client sees as a failed call, never as a broken session."""
    scope = getattr(ctx.request_context.request, "scope", None) or {}
    key_call = scope.get(SCOPE_KEY_CALLS, {}).get(str(ctx.request_id))
    try:
        return await database_sync_to_async(function, thread_sensitive=False)(key_call=key_call, **kwargs)
    except ServiceError as exc:
        raise ToolError(f"{exc.code}: {exc.message}") from exc


def _read_from(data: dict) -> str:
    version = f" (SDK version {data['sdk_version']})" if data.get("sdk_version") else ""
    return f"Knowledge base {data['kb']}{version}, index {data['index_version']} (built {data['index_built_at']})."


def _notes(data: dict) -> str:
    return "".join(f"\nNote: {note['name']} is not in {note['asked']}; documented in {', '.join(note['versions'])}"
                   + (f" (replaced by {note['replacement']})" if note["replacement"] else "") + "."
                   for note in data.get("version_notes") or ())


def render_search(data: dict) -> str:
    head = f"{_read_from(data)} {len(data['results'])} result(s) for: {data['question']}{_notes(data)}"
    if not data["results"]:
        plan = data["plan"]
        why = {"chitchat": "the question is not about the documentation",
               "out_of_catalog": "no class of that name exists in the documentation"}.get(plan["kind"],
                                                                                           "nothing matched")
        return f"{head}\nNo documentation found: {why}. Do not guess an API that is not documented."
    blocks = [head]
    for chunk in data["results"]:
        name = ".".join(part for part in (chunk["class_name"], chunk["member"]) if part) or chunk["title"]
        cut = "" if chunk.get("complete", True) else " [cut to the budget]"
        dropped = "".join(f"\n(code block left out: {line})" for line in chunk.get("dropped_code_blocks") or ())
        blocks.append(f"[{chunk['rank']}] {name} — {chunk['source']} › {chunk['heading_path']} "
                      f"(chunk {chunk['chunk_id']}){cut}\n{chunk['text']}{dropped}")
    if data.get("cursor"):
        blocks.append(f"{data['tokens']} of {data['max_tokens']} tokens; {len(data['left_out'])} more section(s): "
                      f"call again with cursor \"{data['cursor']}\" for the next ones.")
    return "\n\n".join(blocks)


def render_ask(data: dict) -> str:
    lines = [data["answer"] or "(no answer)", "",
             f"Confidence: {data['confidence']}" + (" (degraded: no generation model)" if data["degraded"] else "")
             + (f"; {data['reason']}" if data["reason"] else ""),
             _read_from(data)]
    if data["citations"]:
        lines.append("Sources:")
        lines.extend(f"[{c['number']}] {c['source']} › {c['heading_path']} (chunk {c['chunk_id']})"
                     for c in data["citations"])
    return "\n".join(lines)


def _schema(description: str, **json_schema) -> FieldInfo:
    """Advertise a parameter's JSON Schema without letting the SDK enforce it: the service checks every
    argument itself, so a bad one is a recorded call with a stable error code, like any other failure."""
    return Field(description=description, json_schema_extra=json_schema)


def build_server(*, transport: str = "http") -> MCPServer:
    """A new MCP server with the deployment's two tools; `transport` labels calls that carry no HTTP request."""
    slug = settings.RAG_PRODUCT_SLUG
    if not SLUG_PATTERN.fullmatch(slug):
        raise ImproperlyConfigured(f"RAG_PRODUCT_SLUG must match {SLUG_PATTERN.pattern}, got {slug!r}")
    product = settings.RAG_PRODUCT_NAME
    search_name, ask_name = tool_names()
    search_description, ask_description = _descriptions(product, search_name, ask_name)
    server = MCPServer(
        name=f"{slug}-docs", title=f"{product} documentation",
        instructions=(f"Answers questions about {product}'s API from its official documentation. Use "
                      f"{search_name} for reference text and {ask_name} for cited answers."),
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True)

    async def search_docs(
        ctx: Context,
        question: Annotated[Any, _schema("What you are looking for, in Chinese or English", type="string",
                                         minLength=1, maxLength=LIMITS.question_chars)],
        top_k: Annotated[Any, _schema("How many chunks (1-50; default 5)", type="integer", minimum=1,
                                      maximum=LIMITS.top_k)] = None,
        kb: Annotated[Any, _schema("Knowledge base slug; default: the deployment's", type="string")] = None,
        sdk_version: Annotated[Any, _schema(VERSION_HELP, type="string", maxLength=32)] = None,
        version: Annotated[Any, _schema("The same as sdk_version", type="string", maxLength=32)] = None,
        max_tokens: Annotated[Any, _schema(f"Token budget of the response (default {DEFAULT_MAX_TOKENS})",
                                           type="integer", minimum=MIN_BUDGET, maximum=MAX_TOKENS_LIMIT)] = None,
        cursor: Annotated[Any, _schema("The cursor a previous response gave, to continue with its next sections",
                                       type="string")] = None,
    ) -> Annotated[CallToolResult, SearchOutput]:
        data = await _run(mcp_search, ctx, caller=_caller(ctx, transport), question=question, top_k=top_k, kb=kb,
                          sdk_version=sdk_version, version=version, max_tokens=max_tokens, cursor=cursor)
        return CallToolResult(content=[TextContent(type="text", text=render_search(data))], structured_content=data)

    async def ask_docs(
        ctx: Context,
        question: Annotated[Any, _schema("The question, in Chinese or English", type="string", minLength=1,
                                         maxLength=LIMITS.question_chars)],
        exclude: Annotated[Any, _schema("Chunk ids to leave out of the evidence", type="array",
                                        items={"type": "string"}, maxItems=LIMITS.exclude)] = None,
        kb: Annotated[Any, _schema("Knowledge base slug; default: the deployment's", type="string")] = None,
        sdk_version: Annotated[Any, _schema(VERSION_HELP, type="string", maxLength=32)] = None,
        version: Annotated[Any, _schema("The same as sdk_version", type="string", maxLength=32)] = None,
        max_tokens: Annotated[Any, _schema(f"Token budget of the answer and its cited texts (default "
                                           f"{DEFAULT_MAX_TOKENS})", type="integer", minimum=MIN_BUDGET,
                                           maximum=MAX_TOKENS_LIMIT)] = None,
    ) -> Annotated[CallToolResult, AskOutput]:
        data = await _run(mcp_ask, ctx, caller=_caller(ctx, transport), question=question, exclude=exclude, kb=kb,
                          sdk_version=sdk_version, version=version, max_tokens=max_tokens)
        return CallToolResult(content=[TextContent(type="text", text=render_ask(data))], structured_content=data)

    async def list_versions(
        ctx: Context,
        kb: Annotated[Any, _schema("Knowledge base slug; default: the deployment's", type="string")] = None,
    ) -> Annotated[CallToolResult, VersionsOutput]:
        data = await _run(mcp_list_versions, ctx, kb=kb)
        lines = [f"{data['kb']}: " + (f"default {data['default']}" if data["versions"] else "no SDK versions")]
        lines += [f"- {v['version']}" + (f" ({', '.join(v['aliases'])})" if v["aliases"] else "")
                  + (f": {v['changes']}" if v["changes"] else "") for v in data["versions"]]
        return CallToolResult(content=[TextContent(type="text", text="\n".join(lines))], structured_content=data)

    server.add_tool(search_docs, name=search_name, title=f"Search {product} docs", description=search_description,
                    annotations=read_only)
    server.add_tool(ask_docs, name=ask_name, title=f"Ask {product} docs", description=ask_description,
                    annotations=read_only)
    async def read_docs(
        ctx: Context,
        source: Annotated[Any, _schema("A page path, or `page#anchor` for one section: a result's `link`",
                                       type="string", minLength=1, maxLength=1000)],
        kb: Annotated[Any, _schema("Knowledge base slug; default: the deployment's", type="string")] = None,
        sdk_version: Annotated[Any, _schema(VERSION_HELP, type="string", maxLength=32)] = None,
        max_tokens: Annotated[Any, _schema(f"Token budget of the response (default {DEFAULT_MAX_TOKENS})",
                                           type="integer", minimum=MIN_BUDGET, maximum=MAX_TOKENS_LIMIT)] = None,
        cursor: Annotated[Any, _schema("The cursor a previous read gave, to read on", type="string")] = None,
    ) -> Annotated[CallToolResult, ReadOutput]:
        data = await _run(mcp_read, ctx, source=source, kb=kb, sdk_version=sdk_version, max_tokens=max_tokens,
                          cursor=cursor)
        tail = (f"\n\n({data['tokens']} of {data['max_tokens']} tokens; read on with cursor \"{data['cursor']}\")"
                if data["cursor"] else "")
        return CallToolResult(content=[TextContent(type="text", text=data["text"] + tail)], structured_content=data)

    server.add_tool(read_docs, name=read_tool_name(), title=f"Read {product} docs",
                    description=f"Read a page of {product}'s documentation, or one section of it, by the `link` a "
                                f"{search_name} or {ask_name} result gave, within a token budget; a cursor reads on.",
                    annotations=read_only)
    server.add_tool(list_versions, name=versions_tool_name(), title=f"{product} SDK versions",
                    description=f"List the SDK versions of {product}'s documentation that can be asked (pass one as "
                                f"`sdk_version` to {search_name} or {ask_name}), with their aliases and what "
                                f"changed from the version before.", annotations=read_only)
    _add_resources(server, product)
    _add_prompts(server, product)
    return server


async def _read(function, *, prompt: bool = False, **kwargs):
    """A resource or prompt's blocking service call in a worker thread; a service error reaches the client as
    `<code>: <message>` (a resource error, or for a prompt an invalid-params error the SDK passes through)."""
    try:
        return await database_sync_to_async(function, thread_sensitive=False)(**kwargs)
    except ServiceError as exc:
        if prompt:
            raise MCPError(INVALID_PARAMS, f"{exc.code}: {exc.message}") from exc
        raise ResourceError(f"{exc.code}: {exc.message}") from exc


def _add_resources(server: MCPServer, product: str) -> None:
    """The knowledge bases, each one's pages, and each page (what the read tool reads, without a budget argument:
    a page over 25,000 tokens says how to read on). Reading them is not a tool call: no key quota is spent."""

    @server.resource(f"{RESOURCE_SCHEME}://knowledge-bases", name="knowledge-bases",
                     title=f"{product} knowledge bases", mime_type="application/json",
                     description="Every knowledge base: its active index, page count, SDK versions and pages URI.")
    async def knowledge_bases() -> str:
        return json.dumps(await _read(mcp_knowledge_bases), ensure_ascii=False)

    @server.resource(f"{RESOURCE_SCHEME}://{{kb}}/pages", name="pages", title="Pages of a knowledge base",
                     mime_type="application/json",
                     description="The pages of a knowledge base (of an SDK: its latest version), each with its URI.")
    async def pages(kb: str) -> str:
        return json.dumps(await _read(mcp_pages, kb=kb), ensure_ascii=False)

    @server.resource(f"{RESOURCE_SCHEME}://{{kb}}/pages/{{+path}}", name="page", title="A documentation page",
                     mime_type="text/markdown",
                     description="A page's Markdown, as the read tool gives it; `path#anchor` for one section.")
    async def page(kb: str, path: str) -> str:
        return await _read(mcp_page, kb=kb, path=path)


def _add_prompts(server: MCPServer, product: str) -> None:
    @server.prompt(name="explain_api", title=f"Explain a {product} API",
                   description="Explain a class or member from the documentation, with its signature and citations.")
    async def explain_api(name: str, kb: str | None = None) -> str:
        return await _read(prompt_explain_api, prompt=True, name=name, kb=kb)

    @server.prompt(name="migrate_versions", title=f"Migrate between {product} versions",
                   description="Migrate code from one SDK version to another: the prompt holds what the API "
                               "reference says changed between them.")
    async def migrate_versions(from_version: str, to_version: str, kb: str | None = None) -> str:
        return await _read(prompt_migrate, prompt=True, older=from_version, newer=to_version, kb=kb)

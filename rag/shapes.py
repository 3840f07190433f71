"""Plain-dict shapes of question outcomes, shared by the CLI, the JSON API and the MCP tools."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

ANCHOR_SAFE = "()-._~:,!$*+;=@/'"  # characters a URL fragment may hold as they are (RFC 3986)

if TYPE_CHECKING:
    from rag.engine.types import Citation, Hit
    from rag.services.questions import AnswerOutcome, SearchOutcome


def heading_path_text(path: tuple[str, ...]) -> str:
    """The heading path under the page title, as shown with a chunk ("属性 > .fov")."""
    return " > ".join(path[1:]) if len(path) > 1 else path[0] if path else ""


def link_of(source: str, anchor: str) -> str:
    """Where a section is: its page, and the generator's anchor in it when it has one (`api.html#click.echo`),
    percent-encoded where a URL needs it (Javadoc's `<init>(int)` is `%3Cinit%3E(int)`, as its own links write it)."""
    return f"{source}#{quote(anchor, safe=ANCHOR_SAFE)}" if anchor else source


def hit_as_dict(hit: Hit, *, kb: str, version: str) -> dict:
    """One result in the shape of seed 000's `search`, plus chunk id, class and member."""
    chunk = hit.chunk
    path = chunk.heading_path
    metadata = {f"h{n}": heading for n, heading in enumerate(path, start=1)}
    metadata.update({"kb": kb, "version": version, "part": chunk.part})
    return {
        "source": chunk.source,
        "title": chunk.title,
        "heading_path": heading_path_text(path),
        "chunk_index": chunk.chunk_index,
        "score": round(hit.score, 6),
        "raw_score": round(hit.raw_score, 6),
        "metadata": metadata,
        "content": chunk.text,
        "chunk_id": chunk.chunk_id,
        "class_name": chunk.class_name,
        "member": chunk.member,
        "anchor": chunk.anchor,
        "link": link_of(chunk.source, chunk.anchor),
    }


def sdk_version_as_dict(outcome: SearchOutcome | AnswerOutcome) -> dict:
    """Which SDK version was read (null for a knowledge base without versions), and what the question named that
    this version lacks and another documents: every face shows both."""
    return {"sdk_version": outcome.sdk_version or None,
            "version_notes": [note.as_dict() for note in outcome.version_notes]}


def search_as_dict(outcome: SearchOutcome | AnswerOutcome, *, top_k: int | None) -> dict:
    result = outcome.result
    return {
        "question": outcome.question,
        "mode": result.mode,
        "top_k": top_k if top_k is not None else 5,
        "kb": outcome.kb,
        "version": outcome.version,
        **sdk_version_as_dict(outcome),
        "built_at": outcome.built_at,  # which docs were read: when the version was built and from which revision
        "source_revision": outcome.source_revision,
        "results": [hit_as_dict(h, kb=outcome.kb, version=outcome.version) for h in result.hits],
        "plan": result.plan.as_dict(),
        "excluded": list(result.excluded),
        "timings_ms": result.timings_ms,
    }


def context_text(outcome: SearchOutcome, pieces: list[tuple[int, Hit, str]] | None = None) -> str:
    """Number the evidence the way seed 000's `context` does: source, file, title, heading path, text. `pieces`
    (rank, hit, text as packed into a token budget) replace the adopted hits when given."""
    if pieces is None:
        pieces = [(n, hit, hit.chunk.text) for n, hit in enumerate(outcome.result.hits, start=1)]
    blocks = []
    for n, hit, text in pieces:
        chunk = hit.chunk
        heading = " > ".join(chunk.heading_path[1:]) or chunk.title
        blocks.append(
            f"[{n}] 来源: {chunk.title} · {heading}\n文件: {chunk.source}\n标题: {chunk.title}\n"
            f"标题路径: {heading}\n\n---\n{text}"
        )
    return "\n\n".join(blocks)


def sources_of(outcome: SearchOutcome | AnswerOutcome) -> list[str]:
    return list(dict.fromkeys(h.chunk.source for h in outcome.result.hits))


def citation_as_dict(citation: Citation) -> dict:
    return {
        "number": citation.number,
        "chunk_id": citation.chunk_id,
        "source": citation.source,
        "heading_path": heading_path_text(citation.heading_path),
        "anchor": citation.anchor,
        "link": link_of(citation.source, citation.anchor),
    }


def cited_chunks(outcome: AnswerOutcome) -> list[dict]:
    """Each citation with the chunk it points to: class, member and text (the evidence the answer used), and the
    SDK version it comes from (null for a knowledge base without versions)."""
    hits = {h.chunk.chunk_id: h for h in outcome.result.hits}
    cited = []
    for citation in outcome.answer.citations:
        hit = hits.get(citation.chunk_id)
        cited.append({**citation_as_dict(citation), "class_name": hit.chunk.class_name if hit else "",
                      "member": hit.chunk.member if hit else "", "text": hit.chunk.text if hit else "",
                      "sdk_version": outcome.sdk_version or None})
    return cited

"""Plain-dict shapes of engine results, shared by the CLI, the JSON API and the MCP tools."""

from __future__ import annotations

from rag.engine.generate import Citation
from rag.engine.types import Hit, SearchResult


def hit_as_dict(hit: Hit, *, kb: str, version: str) -> dict:
    """One result in the shape of seed 000's `search`, plus chunk id, class and member."""
    chunk = hit.chunk
    path = chunk.heading_path
    metadata = {f"h{n}": heading for n, heading in enumerate(path, start=1)}
    metadata.update({"kb": kb, "version": version, "part": chunk.part})
    return {
        "source": chunk.source,
        "title": chunk.title,
        "heading_path": " > ".join(path[1:]) if len(path) > 1 else path[0] if path else "",
        "chunk_index": chunk.chunk_index,
        "score": round(hit.score, 6),
        "raw_score": round(hit.raw_score, 6),
        "metadata": metadata,
        "content": chunk.text,
        "chunk_id": chunk.chunk_id,
        "class_name": chunk.class_name,
        "member": chunk.member,
    }


def search_as_dict(result: SearchResult, *, kb: str, question: str, top_k: int | None) -> dict:
    return {
        "question": question,
        "mode": result.mode,
        "top_k": top_k if top_k is not None else 5,
        "kb": kb,
        "version": result.version,
        "results": [hit_as_dict(h, kb=kb, version=result.version) for h in result.hits],
        "plan": result.plan.as_dict(),
        "excluded": list(result.excluded),
        "timings_ms": result.timings_ms,
    }


def context_text(result: SearchResult) -> str:
    """Number the evidence the way seed 000's `context` does: source, file, title, heading path, text."""
    blocks = []
    for n, hit in enumerate(result.hits, start=1):
        chunk = hit.chunk
        heading = " > ".join(chunk.heading_path[1:]) or chunk.title
        blocks.append(
            f"[{n}] 来源: {chunk.title} · {heading}\n文件: {chunk.source}\n标题: {chunk.title}\n"
            f"标题路径: {heading}\n\n---\n{chunk.text}"
        )
    return "\n\n".join(blocks)


def sources_of(result: SearchResult) -> list[str]:
    return list(dict.fromkeys(h.chunk.source for h in result.hits))


def citation_as_dict(citation: Citation) -> dict:
    path = citation.heading_path
    return {
        "number": citation.number,
        "chunk_id": citation.chunk_id,
        "source": citation.source,
        "heading_path": " > ".join(path[1:]) if len(path) > 1 else path[0] if path else "",
    }

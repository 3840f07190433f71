"""The three faces' reply shapes of one `RetrievalOutcome`: seed 002's (RAGFlow's internal chunk names),
RAGFlow's public API names, and Dify's records. Nothing is computed here that the service did not decide."""

from __future__ import annotations

from urllib.parse import urlsplit

from rag.services import RetrievalOutcome
from rag.services.filters import document_url
from rag.services.retrieval import DocumentAggregate, RetrievedChunk


LINK_SCHEMES = ("http", "https")


def link_of(document) -> str:
    """The page's url when a reader may follow it: http(s), or relative to the site; else "". A front matter
    `url: javascript:…` (or data:, file:, …) never reaches a reply, nor one with spaces or control characters,
    which browsers strip before they read the scheme."""
    url = document_url(document) if document is not None else ""
    if not url or "\\" in url or any(ord(c) <= 0x20 or ord(c) == 0x7f for c in url):
        return ""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # an unbalanced IPv6 bracket and the like
        return ""
    return url if scheme in LINK_SCHEMES or not scheme else ""


def _labels(document) -> list[dict]:
    if document is None:
        return []
    return [{"id": row.value.pk, "label_id": row.value.label_id, "label": row.value.label.name, "value": row.value.value}
            for row in document.document_labels.all()]


def _doc_id(document) -> str:
    return str(document.pk) if document is not None else ""


def _doc_name(chunk: RetrievedChunk | DocumentAggregate) -> str:
    return chunk.source  # the page's path: its file name within the knowledge base


def seed_chunk(chunk: RetrievedChunk, outcome: RetrievalOutcome) -> dict:
    shaped = {
        "chunk_id": chunk.chunk_id,
        "content_with_weight": chunk.text,
        "doc_id": _doc_id(chunk.document),
        "docnm_kwd": _doc_name(chunk),
        "kb_ids": [str(chunk.kb.pk)],
        "important_kwd": list(chunk.keywords),
        "image_id": "",
        "similarity": chunk.similarity,
        "vector_similarity": chunk.vector_similarity,
        "term_similarity": chunk.term_similarity,
        "content_ltks": " ".join(chunk.tokens),
        "highlight": chunk.highlight,
        "question": outcome.question,
        "extra": outcome.setting.extra,
        "source": chunk.kb.slug,
        "character_count": len(chunk.text),
        "duration": "",
        "url": link_of(chunk.document),
        "title": chunk.title,
    }
    if chunk.rank_score is not None:
        shaped["rank_score"] = chunk.rank_score
    return shaped


def seed_doc_agg(aggregate: DocumentAggregate) -> dict:
    document = aggregate.document
    return {"doc_id": _doc_id(document), "doc_name": _doc_name(aggregate), "count": aggregate.count,
            "avg_score": aggregate.avg_score, "semantic_score": aggregate.semantic_score, "labels": _labels(document),
            "create_time": document.first_seen_at.isoformat() if document is not None else "",
            "text": aggregate.title}


def seed_data(outcome: RetrievalOutcome) -> dict:
    return {"total": outcome.total, "chunks": [seed_chunk(c, outcome) for c in outcome.chunks],
            "doc_aggs": [seed_doc_agg(a) for a in outcome.doc_aggs], "summary": outcome.summary}


def ragflow_chunk(chunk: RetrievedChunk, *, with_highlight: bool) -> dict:
    shaped = {
        "id": chunk.chunk_id,
        "content": chunk.text,
        "content_ltks": " ".join(chunk.tokens),
        "document_id": _doc_id(chunk.document),
        "document_keyword": _doc_name(chunk),
        "dataset_id": str(chunk.kb.pk),
        "kb_id": str(chunk.kb.pk),
        "image_id": "",
        "important_keywords": list(chunk.keywords),
        "positions": [],
        "similarity": chunk.score,
        "vector_similarity": chunk.vector_similarity,
        "term_similarity": chunk.term_similarity,
        "url": link_of(chunk.document) if chunk.document is not None else None,
        "doc_type": "",
    }
    if with_highlight:
        shaped["highlight"] = chunk.highlight
    return shaped


def ragflow_data(outcome: RetrievalOutcome, *, with_highlight: bool) -> dict:
    return {"total": outcome.total,
            "chunks": [ragflow_chunk(c, with_highlight=with_highlight) for c in outcome.chunks],
            "doc_aggs": [{"doc_name": _doc_name(a), "doc_id": _doc_id(a.document), "count": a.count}
                         for a in outcome.doc_aggs]}


def _labels_by_name(document) -> dict[str, list[str]]:
    named: dict[str, list[str]] = {}
    for row in _labels(document):
        named.setdefault(row["label"], []).append(row["value"])
    return named


def dify_record(chunk: RetrievedChunk) -> dict:
    document = chunk.document
    metadata = dict(document.metadata) if document is not None and isinstance(document.metadata, dict) else {}
    metadata.update({"document_id": _doc_id(document), "doc_id": _doc_id(document), "path": chunk.source,
                     "chunk_id": chunk.chunk_id, "knowledge_id": str(chunk.kb.pk), "heading": chunk.title,
                     "url": link_of(document),
                     "labels": _labels_by_name(document)})
    title = document.title if document is not None and document.title else chunk.source
    return {"content": chunk.text, "score": chunk.score, "title": title, "metadata": metadata}

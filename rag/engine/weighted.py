"""Weighted retrieval (seed 002): every chunk gets a vector similarity and a term similarity, both on 0..1, and
the fused `similarity = w·vector + (1 − w)·term` ranks them, as RAGFlow's hybrid similarity weights its two sides.

- vector similarity: the cosine of the question's and the chunk's embeddings (the vectors are normalised),
  below 0 counted as 0.
- term similarity: the chunk's BM25 score for the question (bm25s' Lucene variant, k1 = 1.5, b = 0.75),
  divided by what a chunk of average length holding each of the question's distinct terms once would score,
  and capped at 1. So 1.0 means every term of the question is in the chunk, and a term that is rare in the
  knowledge base weighs more than a common one (its IDF). A term that occurs nowhere in the knowledge base
  still counts in the divisor, as a term of a single document would.

`WeightedRetriever(reader, queries).run(question, dense_weight=…, top_k=…, mask=…)` returns the `top_k` best
chunks by the fused similarity, ties in index order. The presentation helpers (`content_tokens`,
`important_keywords`, `highlight`) show a chunk the way the retrieval APIs return it.
"""

from __future__ import annotations

import functools
import html
import math
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .embed import QueryVectorCache
from .index import VersionReader, top_positions
from .routes import elapsed_ms
from .text import HAN_RE, pieces, tokenize
from .types import Chunk

IMPORTANT_KEYWORDS = 5


@dataclass(frozen=True, slots=True)
class ScoredHit:
    """A chunk with the two similarities and their weighted sum, each on 0..1."""

    chunk: Chunk
    position: int  # in its version's chunk list
    similarity: float
    vector_similarity: float
    term_similarity: float


@dataclass(frozen=True, slots=True)
class WeightedResult:
    hits: tuple[ScoredHit, ...]  # at most top_k, best first
    tokens: tuple[str, ...]  # the distinct query terms the term similarity counted
    timings_ms: dict
    embed_cached: bool = False


def idf(reader: VersionReader, token: str) -> float:
    """Lucene's BM25 IDF, ln(1 + (N − df + 0.5) / (df + 0.5)), as bm25s scores with it."""
    df = reader.document_frequency(token)
    n = reader.bm25_count
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def term_similarities(reader: VersionReader, tokens: list[str]) -> np.ndarray:
    """Every chunk's term similarity for the query terms (see the module docstring), on 0..1."""
    distinct = list(dict.fromkeys(tokens))
    if not distinct:
        return np.zeros(reader.count, dtype=np.float32)
    ideal = sum(idf(reader, t) for t in distinct) / (reader.bm25.k1 + 1)  # one occurrence each, average length
    scores = reader.bm25_scores(distinct)
    return np.clip(scores / ideal, 0.0, 1.0).astype(np.float32)


def vector_similarities(reader: VersionReader, vector: np.ndarray, top_k: int) -> np.ndarray:
    """Every chunk's cosine with the question, on 0..1. A version searched through LanceDB's ANN index knows
    it only for its `top_k` nearest chunks (the others count 0)."""
    scores = reader.dense_scores(vector)
    if scores is None:
        scores = np.zeros(reader.count, dtype=np.float32)
        positions, values = reader.dense_search(vector, top_k)
        scores[positions] = values
    return np.clip(scores, 0.0, 1.0).astype(np.float32)


@dataclass
class WeightedRetriever:
    """Rank one opened version's chunks by the weighted similarity."""

    reader: VersionReader
    queries: QueryVectorCache

    def run(self, question: str, *, dense_weight: float, top_k: int, mask: np.ndarray | None = None,
            keywords: str = "") -> WeightedResult:
        """The `top_k` best chunks (within `mask` when given) for the question. `keywords` (a model's rewrite)
        are counted as more query terms; the vector side reads the question only."""
        if not 0.0 <= dense_weight <= 1.0:
            raise ValueError("dense_weight must be within 0..1")
        reader, timings = self.reader, {}
        started = time.perf_counter()
        tokens = reader.tokenize(f"{question} {keywords}" if keywords else question)
        term = term_similarities(reader, tokens) if dense_weight < 1.0 else np.zeros(reader.count, dtype=np.float32)
        timings["term"] = elapsed_ms(started)
        cached = False
        vector = np.zeros(reader.count, dtype=np.float32)
        if dense_weight > 0.0:
            started = time.perf_counter()
            embedding, cached = self.queries.embed_query(question)
            timings["embed"] = elapsed_ms(started)
            started = time.perf_counter()
            vector = vector_similarities(reader, embedding, top_k)
            timings["dense"] = elapsed_ms(started)
        started = time.perf_counter()
        fused = dense_weight * vector + (1.0 - dense_weight) * term
        positions, _ = top_positions(fused, top_k, mask=mask)
        positions.sort(key=lambda i: (-float(fused[i]), i))  # ties in index order, the same on every call
        hits = tuple(ScoredHit(chunk=reader.chunks[i], position=i, similarity=float(fused[i]),
                               vector_similarity=float(vector[i]), term_similarity=float(term[i]))
                     for i in positions)
        timings["rank"] = elapsed_ms(started)
        return WeightedResult(hits=hits, tokens=tuple(dict.fromkeys(tokens)), timings_ms=timings, embed_cached=cached)


# -- how a chunk is shown ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=50_000)
def _word_tokens(word: str, stem: bool) -> tuple[str, ...]:
    """A word's index tokens, cached: the same words recur in every chunk shown (measured 18 ms a chunk uncached)."""
    return tuple(tokenize(word, stem=stem))


@functools.lru_cache(maxsize=4096)
def _text_tokens(text: str, stem: bool) -> tuple[str, ...]:
    """A chunk text's tokens, cached: a chunk often ranks again for the next question."""
    return tuple(tokenize(text, stem=stem))


def content_tokens(reader: VersionReader, chunk: Chunk) -> list[str]:
    """The chunk's text as this version's BM25 index tokenizes it (RAGFlow's `content_ltks`)."""
    return list(_text_tokens(chunk.text, reader.stem))


def important_keywords(reader: VersionReader, chunk: Chunk, count: int = IMPORTANT_KEYWORDS) -> list[str]:
    """The chunk's `count` words of most BM25 weight, IDF times saturated term frequency, as written (lowercased)."""
    words = [w for w in _text_tokens(chunk.text, False) if len(w) > 1 and not w.isdigit()]
    k1 = reader.bm25.k1
    weights: dict[str, float] = {}
    for word, tf in Counter(words).items():
        indexed = _word_tokens(word, reader.stem)
        if indexed:
            weights[word] = idf(reader, indexed[0]) * tf / (tf + k1)
    return [w for w, _ in sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:count]]


def highlight(reader: VersionReader, text: str, tokens: tuple[str, ...] | list[str]) -> str:
    """The text HTML-escaped, each word that matches a query term wrapped in `<em>`."""
    wanted = set(tokens)
    if not wanted:
        return html.escape(text)
    out, seen = [], {}
    for piece in pieces(text):
        matched = seen.get(piece)
        if matched is None:
            matched = seen[piece] = bool((HAN_RE.search(piece) or any(c.isalnum() for c in piece))
                                         and wanted.intersection(_word_tokens(piece, reader.stem)))
        out.append(f"<em>{html.escape(piece)}</em>" if matched else html.escape(piece))
    return "".join(out)

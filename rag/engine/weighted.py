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
chunks of one version by the fused similarity, ties in index order. `WeightedSearcher.run(question, sources,
setting)` is the retrieval APIs' whole ranking over several versions (one `WeightedSource` each): each source's
`top_k` best (its question corrected against its own catalog), merged in similarity order (grouped by priority
when asked), the first `top_k`, those at or above the similarity threshold, reranked when asked (the API, then the
model) and kept at or above the rank threshold. The presentation helpers (`content_tokens`,
`important_keywords`, `highlight`) show a chunk the way the retrieval APIs return it.
"""

from __future__ import annotations

import functools
import html
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .embed import QueryVectorCache
from .index import VersionReader, top_positions
from .plan import Planner
from .rerank import Reranker
from .routes import elapsed_ms
from .text import HAN_RE, pieces, tokenize
from .types import Chunk, Hit, Usage

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


@dataclass(frozen=True, slots=True)
class WeightedSource:
    """One version to search: what the caller knows it by, its reader and planner, the chunks it may return."""

    key: int  # the caller's id for it (a knowledge base's); candidates carry it back, equal similarities break on it
    reader: VersionReader
    planner: Planner  # corrects the question against this version's own catalog
    mask: np.ndarray | None = None  # the chunks a document filter allows; None: every chunk
    group: int = 0  # its priority group when the setting groups by priority (0 first)


@dataclass(frozen=True, slots=True)
class WeightedSetting:
    """How the sources are ranked, merged, cut and reranked (the retrieval APIs' checked `rag_setting`)."""

    dense_weight: float = 0.5
    top_k: int = 30  # candidates per source, and of the merged list
    similarity_threshold: float = 0.2
    rerank: tuple[str, ...] = ()  # backends to reorder the passing candidates with, in order: "api", "llm"
    rank_score_threshold: float = 0.0
    by_priority: bool = False  # group the candidates by their source's group, before the cut and after a rerank


@dataclass(frozen=True, slots=True)
class WeightedCandidate:
    hit: ScoredHit
    source: WeightedSource
    tokens: tuple[str, ...]  # the query terms its source's ranking counted (highlighted)
    rank_score: float | None = None  # when reranked, on 0..1

    @property
    def score(self) -> float:
        return self.rank_score if self.rank_score is not None else self.hit.similarity


@dataclass(frozen=True, slots=True)
class WeightedSearch:
    passing: tuple[WeightedCandidate, ...]  # every candidate that passed the thresholds, in the final order
    timings_ms: dict
    rerank: str  # the backends that reordered them, joined by "+"; "none"
    usage: Usage  # what the rerank model calls cost


class RerankFailed(Exception):
    """A rerank the setting asked for gave no order (the backend fell back): the ranking cannot honour it."""


@dataclass
class WeightedSearcher:
    """The retrieval APIs' ranking over several versions, built once per process (rag.pipeline)."""

    queries: QueryVectorCache
    rerankers: dict = field(default_factory=dict)  # backend name ("api", "llm") -> Reranker
    rerank_candidates: int = 30  # the model reads at most this many (a listwise prompt)

    def run(self, question: str, sources: Sequence[WeightedSource], setting: WeightedSetting, *,
            keywords: str = "") -> WeightedSearch:
        """Rank the sources' chunks for the question; `keywords` (a model's rewrite) count as more query terms.
        Raise KeyError naming a rerank backend that is not configured, RerankFailed when one gives no order."""
        missing = self.missing(setting)
        if missing:
            raise KeyError(missing[0])
        timings: dict[str, float] = {}
        candidates: list[WeightedCandidate] = []
        for source in sources:
            # Identifiers misspelt against this version's catalog are read corrected ("PerspectivCamera"), as every
            # search reads them: on the written dev set, class hit 83.0% -> 84.4% (half A 77.9 -> 80.9).
            corrected = source.planner.run(question).corrected_question
            if source.mask is not None and not source.mask.any():
                continue
            result = WeightedRetriever(source.reader, self.queries).run(
                corrected, dense_weight=setting.dense_weight, top_k=setting.top_k, mask=source.mask, keywords=keywords)
            for stage, ms in result.timings_ms.items():
                timings[stage] = timings.get(stage, 0.0) + ms
            candidates.extend(WeightedCandidate(hit, source, result.tokens) for hit in result.hits)
        candidates.sort(key=lambda c: (-c.hit.similarity, c.source.key, c.hit.position))
        if setting.by_priority:  # before the top_k cut, so a p0 base's weaker chunks are not cut for p1's
            candidates = _by_group(candidates)
        passing = [c for c in candidates[:setting.top_k] if c.hit.similarity >= setting.similarity_threshold]
        usage = Usage()
        if passing and setting.rerank:
            started = time.perf_counter()
            passing, usage = self._reranked(question, passing, setting)
            timings["rerank"] = elapsed_ms(started)
            if setting.by_priority:
                passing = _by_group(passing)
        return WeightedSearch(passing=tuple(passing), timings_ms=timings,
                              rerank="+".join(setting.rerank) if setting.rerank and passing else "none", usage=usage)

    def missing(self, setting: WeightedSetting) -> list[str]:
        """The rerank backends the setting asks for that are not configured."""
        return [name for name in setting.rerank if name not in self.rerankers]

    def _reranked(self, question: str, passing: list[WeightedCandidate], setting: WeightedSetting):
        """Reorder by each backend in turn; keep those whose last rank score is at or above the rank threshold. The
        model reads at most `rerank_candidates` of them: the others drop out."""
        usage = Usage()
        for backend in setting.rerank:
            reranker: Reranker = self.rerankers[backend]
            if backend == "llm":
                passing = passing[:self.rerank_candidates]
            hits = [Hit(chunk=c.hit.chunk, score=c.score, source="weighted", rank=n)
                    for n, c in enumerate(passing, start=1)]
            result = reranker.run(question, hits)
            if result.backend == "none":
                raise RerankFailed(result.error)
            usage += result.usage
            position_of = {id(hit.chunk): n for n, hit in enumerate(hits)}  # a reranked hit keeps its chunk object
            passing = [replace(passing[position_of[id(hit.chunk)]],
                               rank_score=min(1.0, max(0.0, float(hit.score))) if hit.source == "rerank" else 0.0)
                       for hit in result.hits]
            passing.sort(key=lambda c: -c.rank_score)
        return [c for c in passing if c.rank_score >= setting.rank_score_threshold], usage


def _by_group(candidates: list[WeightedCandidate]) -> list[WeightedCandidate]:
    """Group 0's sources first, then group 1's, …; each group in its present order (sorted() is stable)."""
    return sorted(candidates, key=lambda c: c.source.group)


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

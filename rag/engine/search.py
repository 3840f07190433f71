"""Search (E4 to E6, E11): plan, the vector and BM25 retrievers, the chitchat gate, an optional keyword rewrite,
RRF, an optional rerank and adoption.

`Searcher` is the engine's public entry for questions:
`Searcher(reader=..., queries=..., planner=...).run(question) -> SearchResult`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from .adopt import Adopter
from .chunk import CHANGELOG
from .complete import Completer
from .compose import read_intent
from .embed import QueryVectorCache
from .fuse import rrf_fuse
from .gate import EXEMPLAR_VECTORS, ChitchatGate, ExemplarVectors, weighted_coverage
from .index import VersionReader, top_positions
from .plan import Planner
from .probes import language_gap, offtopic_similarity, same_language
from .rerank import RERANK_CANDIDATES, Reranker, RerankResult
from .retrieve import MAX_BM25_ROUTES, Bm25Retriever, Bm25Routes, DenseRetriever, DenseRoutes, elapsed_ms
from .rewrite import QueryRewriter, RewriteRetriever
from .types import Hit, Plan, SearchResult

__all__ = ["MAX_BM25_ROUTES", "MODES", "Searcher"]

MODES = ("hybrid", "vector", "bm25")


@dataclass
class Searcher:
    """Search one opened index version."""

    reader: VersionReader
    queries: QueryVectorCache
    planner: Planner
    adopter: Adopter = field(default_factory=Adopter)
    completer: Completer | None = field(default_factory=Completer)  # sections the answer needs, by structure
    gate: ChitchatGate = field(default_factory=ChitchatGate)
    exemplars: ExemplarVectors = field(default_factory=lambda: EXEMPLAR_VECTORS, repr=False)  # once per model
    depth: int = 100  # candidates taken from each route before fusion; class sums need depth
    reranker: Reranker | None = None  # reorders the best fused candidates before adoption (E11); None: off
    rewriter: QueryRewriter | None = None  # the model's keywords searched beside the question; None: off
    rerank_candidates: int = RERANK_CANDIDATES  # fused chunks a reranker reorders
    dense: DenseRetriever = field(init=False, repr=False)
    bm25: Bm25Retriever = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.dense = DenseRetriever(self.reader, self.queries, depth=self.depth)
        self.bm25 = Bm25Retriever(self.reader, depth=self.depth)

    def run(self, question: str, *, mode: str = "hybrid", top_k: int | None = None, exclude=(),
            rerank: bool | Reranker | None = None, rewrite: bool | QueryRewriter | None = None,
            fused_depth: int | None = None, complete: bool = False) -> SearchResult:
        """Find the chunks to answer a question from, and record how each stage found them and how long it took.

        `rerank` and `rewrite` choose for this call: None or True runs the configured component (if any),
        False none, and a component runs that one. `fused_depth` keeps more fused candidates than `depth`
        in the result (a face that lists up to 200 candidates). `complete` appends, after the `top_k` adopted
        chunks, the sections an answer needs by the documents' structure (rag.engine.complete): for answers only,
        so a search returns exactly what it asked for."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        started = time.perf_counter()
        timings: dict[str, float] = {}
        reader = self.reader

        with _timed(timings, "plan"):
            plan = self.planner.run(question)
        if plan.kind in ("out_of_catalog", "chitchat"):
            timings["total"] = elapsed_ms(started)
            return SearchResult(plan=plan, hits=(), timings_ms=timings, mode=mode, version=reader.version)
        with _timed(timings, "bm25"):
            tokens = reader.tokenize(plan.corrected_question)

        # A BM25-only search still embeds a question naming nothing: the chitchat gate needs its nearest chunk.
        dense = None
        if mode != "bm25" or not _names_something(plan):
            dense = self.dense.run(plan, ranked=mode != "bm25")
            timings.update(embed=dense.embed_ms, embed_cached=dense.cached, dense=dense.search_ms)

        offtopic = offtopic_similarity(reader.manifest, plan.question)
        coverage = reader.vocabulary_coverage(tokens)
        exemplar = weighted = None
        if dense is not None and not _names_something(plan):
            weighted = weighted_coverage(tokens, reader.document_frequency, reader.bm25_count)
            vector, _ = self.queries.embed_query(plan.corrected_question)  # cached by the dense route
            # A question in another language than the corpus's (Chinese over an English reference) sits farther
            # from every chunk than from any sentence of its own language: its nearness to an exemplar counts
            # less by the gap the probes measured between the two languages at build time.
            exemplar = (self.exemplars.similarity(self.queries.embedder, vector)
                        - language_gap(reader.manifest, plan.question))
        if dense is not None and self.gate.is_chitchat(plan, dense.best_similarity, coverage, offtopic,
                                                       exemplar_similarity=exemplar, weighted_coverage=weighted,
                                                       same_language=same_language(reader.manifest, plan.question)):
            timings["total"] = elapsed_ms(started)
            return SearchResult(plan=replace(plan, kind="chitchat", reason="not a question about this documentation"),
                                hits=(), rankings=dense.rankings, timings_ms=timings, mode=mode, version=reader.version)

        bm25 = None
        if mode != "vector":
            with _timed(timings, "bm25"):
                bm25 = self.bm25.run(plan, tokens)
        rankings = (*(dense.rankings if dense else ()), *(bm25.rankings if bm25 else ()))

        rewriter, rewrite_error = _chosen(self.rewriter, rewrite, "rewrite")
        rewritten = None
        if rewriter is not None:
            with _timed(timings, "rewrite"):
                rewritten = rewriter.run(plan.corrected_question)
            if rewritten.keywords:
                with _timed(timings, "rewrite_search"):
                    rankings += RewriteRetriever(reader, self.queries, depth=self.depth).run(
                        rewritten.keywords, reader.tokenize(rewritten.keywords), mode=mode)

        with _timed(timings, "fuse"):
            fused = [(reader.index_of(chunk_id), score) for chunk_id, score in rrf_fuse(rankings)]
            fused_hits = tuple(Hit(chunk=reader.chunks[i], score=s, source="rrf", rank=n)
                               for n, (i, s) in enumerate(fused[:max(self.depth, fused_depth or 0)], start=1))
        excluded = {reader.index_of(c) for c in exclude} - {None}

        reranker, rerank_error = _chosen(self.reranker, rerank, "rerank")
        reranked = None
        if reranker is not None and fused:
            with _timed(timings, "rerank"):
                fused, reranked = self._rerank(reranker, plan.corrected_question, fused, excluded)

        with _timed(timings, "adopt"):
            hits = self._adopt(plan, fused, excluded, dense, bm25, tokens, top_k)
            if reranked is not None and reranked.backend != "none":
                hits = _marked_reranked(hits, reranked)
        if complete and self.completer is not None and hits:
            with _timed(timings, "adopt"):  # completing the evidence is part of adopting it
                hits = self.completer.run(reader, plan, hits, tokens, read_intent(plan.question),
                                          dense.scores if dense is not None else None)
        timings["total"] = elapsed_ms(started)

        return SearchResult(
            plan=plan,
            hits=hits,
            rankings=rankings,
            fused=fused_hits,
            excluded=tuple(reader.chunks[i].chunk_id for i in sorted(excluded)),
            timings_ms=timings,
            mode=mode,
            version=reader.version,
            weak_evidence=dense is not None and dense.scores is not None and self.gate.is_weak(
                plan, dense.best_similarity, coverage, offtopic, weighted_coverage=weighted),
            rerank=reranked.backend if reranked is not None else "none",
            rerank_error=reranked.error if reranked is not None else rerank_error,
            reranked=reranked.hits if reranked is not None and reranked.backend != "none" else (),
            rewrite=rewritten.keywords if rewritten is not None else "",
            rewrite_error=rewritten.error if rewritten is not None else rewrite_error,
        )

    def _rerank(self, reranker: Reranker, question: str, fused: list[tuple[int, float]],
                excluded: set[int]) -> tuple[list[tuple[int, float]], RerankResult]:
        """Rerank the best `rerank_candidates` fused chunks not excluded; the rest follow in fused order."""
        reader = self.reader
        candidates = [(i, s) for i, s in fused if i not in excluded][: self.rerank_candidates]
        result = reranker.run(question, [Hit(chunk=reader.chunks[i], score=s, source="rrf", rank=n)
                                         for n, (i, s) in enumerate(candidates, start=1)])
        if result.backend == "none":
            return fused, result
        order = [(reader.index_of(h.chunk.chunk_id), h.score) for h in result.hits]
        placed = {i for i, _ in order}
        return order + [pair for pair in fused if pair[0] not in placed], result

    def _adopt(self, plan: Plan, fused: list[tuple[int, float]], excluded: set[int], dense: DenseRoutes | None,
               bm25: Bm25Routes | None, tokens: list[str], top_k: int | None) -> tuple[Hit, ...]:
        """Adopt the evidence from the fused positions; each hit's raw score is its cosine, else its BM25 score."""
        reader = self.reader
        adopter = self.adopter if top_k is None else replace(self.adopter, single=top_k)
        dense_scores = dense.scores if dense is not None else None
        classes = list(plan.classes)
        order = [i for i, _ in fused]
        if len(classes) >= 2 and dense_scores is not None:
            # A named class with nothing in the fused lists still gets its best chunks by the vector side.
            found = {reader.chunks[i].class_name for i in order}
            for name in classes:
                if name not in found:
                    extra, _ = top_positions(dense_scores, adopter.per_class, mask=reader.class_mask(name))
                    order.extend(extra)
        fused_score = dict(fused)
        follows = overviews = frozenset()
        if not classes:  # only the spread of a question naming no class reads them
            follows = {i for i in order if reader.chunks[i].kind == CHANGELOG}
            overviews = {i for i in order if not reader.chunks[i].member}
        adopted = adopter.run(order, classes, lambda i: reader.chunks[i].class_name, excluded, scores=fused_score,
                              follows=follows, overviews=overviews)
        if dense_scores is not None:
            raw = dense_scores
        elif bm25 is not None:
            raw = bm25.question_scores
        else:  # vector-only search of a version searched through ANN
            raw = reader.bm25_scores(tokens)
        return tuple(Hit(chunk=reader.chunks[i], score=fused_score.get(i, 0.0), source="rrf", rank=n,
                         raw_score=float(raw[i]))
                     for n, i in enumerate(adopted, start=1))


def _chosen(configured, wanted, stage: str):
    """Return the component a call runs, and why none runs when one was asked for but none is configured."""
    if wanted is False:
        return None, ""
    if wanted is None or wanted is True:
        if configured is None and wanted is True:
            return None, f"{stage}_not_configured: no {stage} component is configured"
        return configured, ""
    return wanted, ""


def _marked_reranked(hits: tuple[Hit, ...], reranked: RerankResult) -> tuple[Hit, ...]:
    """Say which adopted hits carry a rerank score (source "rerank") rather than a fused one."""
    ids = {h.chunk.chunk_id for h in reranked.hits if h.source == "rerank"}
    return tuple(replace(h, source="rerank") if h.chunk.chunk_id in ids else h for h in hits)


def _names_something(plan: Plan) -> bool:
    return bool(plan.classes or plan.hinted_classes or plan.members)


@contextmanager
def _timed(timings: dict[str, float], stage: str):
    """Add the time the block takes to the stage's milliseconds."""
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + elapsed_ms(started)

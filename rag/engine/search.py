"""Search (E4 to E6, E11): plan, the routes (rag.engine.routes), the chitchat gate, an optional keyword rewrite,
RRF, an optional rerank and adoption.

`Searcher` is the engine's public entry for questions:
`Searcher(reader=..., queries=..., planner=..., routes=...).run(question, SearchOptions(...)) -> SearchResult`.
The routes run by stage: the dense ones, then the chitchat gate (which may stop the search), the keyword ones,
and the rewrite ones once the model gave keywords. The gate, the rewrite and the rerank are steps
(rag.engine.steps): components that run on the same `Query` as the routes.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

from .adopt import Adopter
from .chunk import CHANGELOG
from .complete import Completer
from .compose import read_intent
from .embed import QueryVectorCache
from .fuse import rrf_fuse
from .gate import names_something
from .index import VersionReader, top_positions
from .plan import Planner
from .rerank import RerankResult
from .routes import MAX_BM25_ROUTES, Query, Route, elapsed_ms, load_routes
from .steps import GateStep, RerankStep, RewriteStep
from .types import SEARCH_MODES, Hit, Ranking, SearchOptions, SearchResult

__all__ = ["MAX_BM25_ROUTES", "MODES", "Searcher"]

MODES = SEARCH_MODES
DEFAULT_OPTIONS = SearchOptions()
ROUTE_STAGES = ("dense", "bm25", "rewrite_search")  # the order stages run in; the gate runs after the first


@dataclass
class Searcher:
    """Search one opened index version."""

    reader: VersionReader
    queries: QueryVectorCache
    planner: Planner
    routes: tuple[Route, ...] = field(default_factory=load_routes)  # rag.engine.routes; run in ROUTE_STAGES order
    adopter: Adopter = field(default_factory=Adopter)
    completer: Completer | None = field(default_factory=Completer)  # sections the answer needs, by structure
    gate: GateStep = field(default_factory=GateStep)  # stops a search for small talk
    rewrite: RewriteStep | None = None  # the model's keywords searched beside the question; None: off
    rerank: RerankStep | None = None  # reorders the best fused candidates before adoption (E11); None: off
    depth: int = 100  # candidates taken from each route before fusion; class sums need depth

    def run(self, question: str, options: SearchOptions = DEFAULT_OPTIONS) -> SearchResult:
        """Find the chunks to answer a question from, and record how each stage found them and how long it took.

        `options.rerank` and `options.rewrite` choose for this call: None runs the configured component (if
        any), False none, True the configured one (and say so when none is). `fused_depth` keeps more fused
        candidates than `depth` in the result. `complete` appends, after the adopted chunks, the sections an
        answer needs by the documents' structure (rag.engine.complete): for answers only, so a search returns
        exactly what it asked for."""
        mode = options.mode
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
        query = Query(plan=plan, reader=reader, queries=self.queries, tokens=tokens, depth=self.depth)

        # A BM25-only search still embeds a question naming nothing: the chitchat gate needs its nearest chunk.
        if mode != "bm25" or not names_something(plan):
            query.vector()
            timings.update(embed=query.embed_ms, embed_cached=query.embed_cached)
            with _timed(timings, "dense"):
                query.nearest()
        rankings = self._stage(query, "dense", mode, timings)

        with _timed(timings, self.gate.stage):
            gate = self.gate.run(query)
        if gate is not None and gate.chitchat:
            timings["total"] = elapsed_ms(started)
            return SearchResult(plan=replace(plan, kind="chitchat", reason="not a question about this documentation"),
                                hits=(), rankings=rankings, timings_ms=timings, mode=mode, version=reader.version)

        rankings += self._stage(query, "bm25", mode, timings)
        rewrite, rewrite_error = _chosen(self.rewrite, options.rewrite, "rewrite")
        rewritten = None
        if rewrite is not None:
            with _timed(timings, rewrite.stage):
                rewritten = rewrite.run(query)
            if query.keywords:
                rankings += self._stage(query, "rewrite_search", mode, timings)

        with _timed(timings, "fuse"):
            fused = [(reader.index_of(chunk_id), score) for chunk_id, score in rrf_fuse(rankings)]
            fused_hits = tuple(Hit(chunk=reader.chunks[i], score=s, source="rrf", rank=n)
                               for n, (i, s) in enumerate(fused[:max(self.depth, options.fused_depth or 0)], start=1))
        excluded = {reader.index_of(c) for c in options.exclude} - {None}

        rerank, rerank_error = _chosen(self.rerank, options.rerank, "rerank")
        reranked = None
        if rerank is not None and fused:
            with _timed(timings, rerank.stage):
                fused, reranked = rerank.run(query, fused, excluded)

        dense_scores = query.dense_scores() if query.embedded else None
        with _timed(timings, "adopt"):
            hits = self._adopt(query, fused, excluded, dense_scores, options.top_k)
            if reranked is not None and reranked.backend != "none":
                hits = _marked_reranked(hits, reranked)
        if options.complete and self.completer is not None and hits:
            with _timed(timings, "adopt"):  # completing the evidence is part of adopting it
                hits = self.completer.run(reader, plan, hits, query.tokens, read_intent(plan.question), dense_scores)
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
            weak_evidence=dense_scores is not None and self.gate.weak(query, gate),
            rerank=reranked.backend if reranked is not None else "none",
            rerank_error=reranked.error if reranked is not None else rerank_error,
            reranked=reranked.hits if reranked is not None and reranked.backend != "none" else (),
            rewrite=rewritten.keywords if rewritten is not None else "",
            rewrite_error=rewritten.error if rewritten is not None else rewrite_error,
        )

    def _stage(self, query: Query, stage: str, mode: str, timings: dict[str, float]) -> tuple[Ranking, ...]:
        """Run the routes of one stage that the mode reads, timed as the stage; the keyword routes stop once
        MAX_BM25_ROUTES rankings are found."""
        rankings: list[Ranking] = []
        routes = [r for r in self.routes if r.stage == stage and _reads(mode, r.side)]
        if not routes:
            return ()
        with _timed(timings, stage):
            for route in routes:
                for ranking in route.run(query):
                    rankings.append(ranking)
                    if stage == "bm25" and len(rankings) >= MAX_BM25_ROUTES:
                        return tuple(rankings)
        return tuple(rankings)

    def _adopt(self, query: Query, fused: list[tuple[int, float]], excluded: set[int],
               dense_scores: np.ndarray | None, top_k: int | None) -> tuple[Hit, ...]:
        """Adopt the evidence from the fused positions; each hit's raw score is its cosine (`dense_scores`, when the
        vector side ran), else its BM25 score."""
        reader, plan = self.reader, query.plan
        adopter = self.adopter if top_k is None else replace(self.adopter, single=top_k)
        classes = list(plan.classes)
        order = [i for i, _ in fused]
        if len(classes) >= 2 and dense_scores is not None:
            # A named class with nothing in the fused lists still gets its best chunks by the vector side.
            found = {reader.chunks[i].class_name for i in order}
            for name in classes:
                if name not in found:
                    extra, _ = top_positions(dense_scores, adopter.per_class, mask=reader.class_mask(name))
                    order.extend(extra)
        # A member named with a leading underscore is internal by the convention of Python and JavaScript (PEP 8's
        # "weak internal use indicator"); generators that document one (JSDoc without @private) put it beside the
        # public API. It follows the public sections unless the question names it.
        question = plan.corrected_question or plan.question
        internal = {i for i in order if _internal(reader.chunks[i].member, question)}
        if internal:
            order = [i for i in order if i not in internal] + [i for i in order if i in internal]
        # One place per section: a long section cut into parts would otherwise fill the first places with one
        # member (gtk-doc's `cairo_stroke` three times); its later parts follow every other section found, as
        # the composer answers a section in one block.
        order = _sections_first(order, reader.chunks)
        fused_score = dict(fused)
        follows = overviews = frozenset()
        if not classes:  # only the spread of a question naming no class reads them
            follows = {i for i in order if reader.chunks[i].kind == CHANGELOG}
            overviews = {i for i in order if not reader.chunks[i].member}
        adopted = adopter.run(order, classes, lambda i: reader.chunks[i].class_name, excluded, scores=fused_score,
                              follows=follows, overviews=overviews)
        # The raw score: the cosine, else the question's BM25 (a vector-only search of an ANN version: its BM25 too).
        raw = dense_scores if dense_scores is not None else query.question_scores()
        return tuple(Hit(chunk=reader.chunks[i], score=fused_score.get(i, 0.0), source="rrf", rank=n,
                         raw_score=float(raw[i]))
                     for n, i in enumerate(adopted, start=1))


def _internal(member: str, question: str) -> bool:
    """Whether a member is internal by its name (`_exit`, not `__init__`) and the question does not write it."""
    return member.startswith("_") and not (member.startswith("__") and member.endswith("__")) \
        and member not in question


def _sections_first(order: list[int], chunks) -> list[int]:
    """The positions in order with each section's first part first, and the other parts after them all."""
    seen: set[tuple] = set()
    first, later = [], []
    for i in order:
        key = chunks[i].section_key
        (later if key in seen else first).append(i)
        seen.add(key)
    return first + later


def _reads(mode: str, side: str) -> bool:
    """A hybrid search reads both sides; `vector` only the dense side, `bm25` only the keyword side."""
    return mode == "hybrid" or (mode == "vector") == (side == "dense")


def _chosen(configured, wanted: bool | None, stage: str):
    """Return the step a call runs, and why none runs when one was asked for but none is configured."""
    if wanted is False:
        return None, ""
    if configured is None and wanted is True:
        return None, f"{stage}_not_configured: no {stage} component is configured"
    return configured, ""


def _marked_reranked(hits: tuple[Hit, ...], reranked: RerankResult) -> tuple[Hit, ...]:
    """Say which adopted hits carry a rerank score (source "rerank") rather than a fused one."""
    ids = {h.chunk.chunk_id for h in reranked.hits if h.source == "rerank"}
    return tuple(replace(h, source="rerank") if h.chunk.chunk_id in ids else h for h in hits)


@contextmanager
def _timed(timings: dict[str, float], stage: str):
    """Add the time the block takes to the stage's milliseconds."""
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + elapsed_ms(started)

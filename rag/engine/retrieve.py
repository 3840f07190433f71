"""Retrieve (E5): the vector side and the BM25 side of a search, each one component returning rankings.

`DenseRetriever` embeds the question once and reads one vector search globally and within each named
class, and the named classes' field vectors (a member's names, heading and first sentence); `Bm25Retriever` runs at most `MAX_BM25_ROUTES` keyword routes. Every ranking carries its route
kind and that kind's weight in reciprocal rank fusion (fuse.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .embed import QueryVectorCache
from .index import VersionReader, top_positions
from .types import Hit, Plan, Ranking, RouteKind

MAX_BM25_ROUTES = 6  # seed 001: BM25 runs at most 6 routes
DENSE_CLASS_ROUTES = 3  # named classes the vector search is read within
HEAD_CLASS_ROUTES = 2  # named classes whose member-name field is searched

# RRF weight per route kind. Within a named class the vector ranking orders members best; the whole-question
# BM25 route mostly re-ranks a named class by chunk length (its name is in every chunk), so it counts half.
ROUTE_WEIGHTS = {
    RouteKind.DENSE: 1.0,
    RouteKind.DENSE_CLASS: 2.0,
    RouteKind.DENSE_FIELD: 2.0,
    RouteKind.BM25_QUESTION: 0.5,
    RouteKind.BM25_CLASS: 1.0,
    RouteKind.BM25_HEAD: 1.0,
    RouteKind.BM25_MEMBER: 1.0,
    # The model's keyword rewrite is read like the question's own whole-question routes, with their weights.
    RouteKind.DENSE_REWRITE: 1.0,
    RouteKind.BM25_REWRITE: 0.5,
}


@dataclass(frozen=True, slots=True)
class DenseRoutes:
    """What the vector side found for one question."""

    rankings: tuple[Ranking, ...]
    scores: np.ndarray | None  # every chunk's cosine similarity; None for a version searched through ANN
    best_similarity: float  # of the nearest chunk, 0.0 when there is none; the chitchat gate reads it
    cached: bool  # the query vector came from the cache
    embed_ms: float
    search_ms: float


@dataclass(frozen=True, slots=True)
class Bm25Routes:
    """What the keyword side found for one question."""

    rankings: tuple[Ranking, ...]
    question_scores: np.ndarray  # every chunk's BM25 score for the whole question


@dataclass
class DenseRetriever:
    """Embed the question once; read one vector search over every chunk and within each named class."""

    reader: VersionReader
    queries: QueryVectorCache
    depth: int = 100

    def run(self, plan: Plan, *, ranked: bool = True) -> DenseRoutes:
        """Search the question's vector; with ranked=False only find how near the nearest chunk is."""
        started = time.perf_counter()
        vector, cached = self.queries.embed_query(plan.corrected_question)
        embed_ms = elapsed_ms(started)

        started = time.perf_counter()
        reader = self.reader
        scores = reader.dense_scores(vector)
        if scores is not None:
            ids, values = top_positions(scores, self.depth)
        else:  # too many vectors to hold in memory: LanceDB's ANN index
            ids, values = reader.dense_search(vector, self.depth)
        rankings = []
        if ranked:
            rankings.append(make_ranking(RouteKind.DENSE, ids, values, reader))
            if scores is not None:
                # The same vector search read within each named class: a class's members compete
                # with each other, not with the similar members of every other class.
                # And within each, the field vectors: a member whose name and first sentence say what the
                # question asks rises above one whose long section merely mentions it.
                fields = reader.field_scores(vector) if plan.classes else None
                for name in plan.classes[:DENSE_CLASS_ROUTES]:
                    mask = reader.class_mask(name)
                    in_class, in_class_values = top_positions(scores, self.depth, mask=mask)
                    rankings.append(make_ranking(RouteKind.DENSE_CLASS, in_class, in_class_values, reader, name))
                    if fields is not None:
                        in_class, in_class_values = top_positions(fields, self.depth, mask=mask)
                        rankings.append(make_ranking(RouteKind.DENSE_FIELD, in_class, in_class_values, reader, name))
        return DenseRoutes(rankings=tuple(rankings), scores=scores, best_similarity=values[0] if values else 0.0,
                           cached=cached, embed_ms=embed_ms, search_ms=elapsed_ms(started))


@dataclass
class Bm25Retriever:
    """Run at most MAX_BM25_ROUTES keyword routes: the whole question, each class without its own names,
    the member-name field of a named class, and each named member."""

    reader: VersionReader
    depth: int = 100

    def run(self, plan: Plan, tokens: list[str]) -> Bm25Routes:
        """Rank the chunks by BM25 on every route that finds something, the whole question first."""
        reader = self.reader
        question_scores = reader.bm25_scores(tokens)
        ids, values = top_positions(question_scores, self.depth, mask=question_scores > 0)
        rankings = [make_ranking(RouteKind.BM25_QUESTION, ids, values, reader)]
        # The routes are scored lazily, so none is scored once six have found something.
        for kind, within, (ids, values) in self._routes(plan, tokens, question_scores):
            if ids:
                rankings.append(make_ranking(kind, ids, values, reader, within))
                if len(rankings) >= MAX_BM25_ROUTES:
                    break
        return Bm25Routes(rankings=tuple(rankings), question_scores=question_scores)

    def _routes(self, plan: Plan, tokens: list[str], question_scores: np.ndarray) -> Iterator:
        """Yield (kind, class or member, (ids, scores)) for each route after the whole question, in order."""
        yield from self._class_routes(plan, tokens, question_scores)
        yield from self._head_routes(plan)
        yield from self._member_routes(plan, tokens)

    def _class_routes(self, plan: Plan, tokens: list[str], question_scores: np.ndarray) -> Iterator:
        """Score the question without a class's own names, within the class: every chunk of the class
        carries them, so they would only re-rank the class by chunk length."""
        reader = self.reader
        for name in (*plan.classes, *plan.hinted_classes):
            own = reader.class_tokens(name)
            residual = [t for t in tokens if t not in own]
            scores = reader.bm25_scores(residual) if residual != tokens else question_scores
            mask = reader.class_mask(name) & (scores > 0)
            yield RouteKind.BM25_CLASS, name, top_positions(scores, self.depth, mask=mask)

    def _head_routes(self, plan: Plan) -> Iterator:
        """Score the member-name field of a named class, so a member *about* the question's words leads."""
        reader = self.reader
        for name in plan.classes[:HEAD_CLASS_ROUTES]:
            scores = reader.head_scores(plan.corrected_question, drop=reader.class_tokens(name))
            mask = reader.class_mask(name) & (scores > 0)
            yield RouteKind.BM25_HEAD, name, top_positions(scores, self.depth, mask=mask)

    def _member_routes(self, plan: Plan, tokens: list[str]) -> Iterator:
        """Score the member's name and the question over a named member's chunks, within the named classes
        when the member is one of theirs."""
        reader = self.reader
        in_classes = None
        for member in plan.members:
            mask = reader.member_mask(member)
            if plan.classes:
                if in_classes is None:
                    in_classes = np.zeros(len(reader.chunks), dtype=bool)
                    for name in plan.classes:
                        in_classes |= reader.class_mask(name)
                if (mask & in_classes).any():
                    mask &= in_classes
            scores = reader.bm25_scores(reader.tokenize(member) + tokens)
            yield RouteKind.BM25_MEMBER, member, top_positions(scores, self.depth, mask=mask)


def make_ranking(kind: RouteKind, ids: list[int], scores: list[float], reader: VersionReader,
                 within: str = "") -> Ranking:
    """Build the ranking of one route, named by its kind and the class or member it reads within."""
    source = kind.source
    chunks = reader.chunks
    return Ranking(
        name=f"{kind.value}:{within}" if within else kind.value,
        hits=tuple(Hit(chunk=chunks[i], score=s, source=source, rank=n, raw_score=s)
                   for n, (i, s) in enumerate(zip(ids, scores), start=1)),
        kind=kind,
        weight=ROUTE_WEIGHTS[kind],
    )


def elapsed_ms(since: float) -> float:
    """Return the milliseconds since a `time.perf_counter()` reading, to the microsecond."""
    return round((time.perf_counter() - since) * 1000, 3)

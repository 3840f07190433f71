"""Routes (E5): each one reads the question one way and returns rankings for reciprocal rank fusion.

A search holds one `Query` (the plan, its tokens, and the question's vector, cosines and BM25 scores computed
on first use and shared by every route) and runs its routes in order. A route is one object with
- `stage`: the timing it counts in ("dense", "bm25" or "rewrite_search"); the dense stage runs before the
  chitchat gate, the keyword stage after it, the rewrite stage once the model's keywords are in the query;
- `side`: "dense" or "bm25", so a vector-only search runs only dense routes and a BM25-only one only BM25 routes;
- `run(query) -> Iterable[Ranking]`, lazily: a keyword route is scored only while the search's budget of
  MAX_BM25_ROUTES keyword rankings is not spent.

`DEFAULT_ROUTES` names the engine's routes by dotted path; `RAG_ENGINE["ROUTES"]` can list others, and
`load_routes` imports them. A new route is one module with one class, and one line in that list.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .embed import QueryVectorCache
from .index import VersionReader, top_positions
from .types import Hit, Plan, Ranking, RouteKind

MAX_BM25_ROUTES = 6  # seed 001: BM25 runs at most 6 routes
DENSE_CLASS_ROUTES = 3  # named classes the vector search is read within
HEAD_CLASS_ROUTES = 2  # named classes whose member-name field is searched

# RRF weight per route kind. Within a named class the vector ranking orders members best; the whole-question
# BM25 route mostly re-ranks a named class by chunk length (its name is in every chunk), so it counts half
# when the question names a class (ROUTE_WEIGHTS); when it names none, nothing is re-ranked by a name and
# that route is the keyword side's one reading of the question, so it counts as much as the vector side
# (CLASSLESS_WEIGHTS), as a plain hybrid retriever weighs its two rankings.
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
CLASSLESS_WEIGHTS = {RouteKind.BM25_QUESTION: 1.0, RouteKind.BM25_REWRITE: 1.0}


def route_weight(kind: RouteKind, plan: Plan) -> float:
    """The RRF weight of a route's ranking for this plan: a whole-question BM25 ranking counts half only when the
    question names a class."""
    return CLASSLESS_WEIGHTS.get(kind, ROUTE_WEIGHTS[kind]) if not plan.classes else ROUTE_WEIGHTS[kind]


@dataclass
class Query:
    """One question on its way through a search: what every route reads, each part computed once."""

    plan: Plan
    reader: VersionReader
    queries: QueryVectorCache
    tokens: list[str]  # the corrected question as this version's BM25 index tokenizes it
    depth: int = 100  # candidates each route takes
    keywords: str = ""  # the model's keyword rewrite, once asked; the rewrite routes search it
    embed_cached: bool = False
    embed_ms: float = 0.0
    _vector: np.ndarray | None = field(default=None, repr=False)
    _scores: np.ndarray | None = field(default=None, repr=False)
    _nearest: tuple[list[int], list[float]] | None = field(default=None, repr=False)
    _question_scores: np.ndarray | None = field(default=None, repr=False)

    @property
    def question(self) -> str:
        return self.plan.corrected_question

    def vector(self) -> np.ndarray:
        """The question's embedding, from the query-vector cache when it holds it."""
        if self._vector is None:
            started = time.perf_counter()
            self._vector, self.embed_cached = self.queries.embed_query(self.question)
            self.embed_ms = elapsed_ms(started)
        return self._vector

    def dense_scores(self) -> np.ndarray | None:
        """Every chunk's cosine with the question; None for a version searched through LanceDB's ANN index."""
        self.nearest()
        return self._scores

    def nearest(self) -> tuple[list[int], list[float]]:
        """The `depth` chunks nearest the question and their cosines, best first."""
        if self._nearest is None:
            self._scores, self._nearest = nearest_chunks(self.reader, self.vector(), self.depth)
        return self._nearest

    @property
    def embedded(self) -> bool:
        """The vector side has run: its cosines (or the ANN neighbours) are known."""
        return self._nearest is not None

    @property
    def best_similarity(self) -> float:
        """The nearest chunk's cosine, 0.0 when there is none; the chitchat gate reads it."""
        values = self.nearest()[1]
        return values[0] if values else 0.0

    def question_scores(self) -> np.ndarray:
        """Every chunk's BM25 score for the whole question."""
        if self._question_scores is None:
            self._question_scores = self.reader.bm25_scores(self.tokens)
        return self._question_scores


class Route(Protocol):
    stage: str  # "dense", "bm25" or "rewrite_search"
    side: str  # "dense" or "bm25"

    def run(self, query: Query) -> Iterable[Ranking]:
        """The route's rankings for the query, produced lazily."""


# -- the vector side ------------------------------------------------------------------------------------------


class DenseRoute:
    """The question's vector over every chunk."""

    stage = side = "dense"

    def run(self, query: Query) -> Iterator[Ranking]:
        ids, values = query.nearest()
        yield make_ranking(RouteKind.DENSE, ids, values, query.reader)


class DenseClassRoute:
    """The same vector search read within each named class, so a class's members compete with each other and not
    with the similar members of every other class; and within each, the field vectors: a member whose name and
    first sentence say what the question asks rises above one whose long section merely mentions it."""

    stage = side = "dense"

    def run(self, query: Query) -> Iterator[Ranking]:
        scores = query.dense_scores()
        if scores is None or not query.plan.classes:  # ANN versions have no cosine for every chunk
            return
        reader = query.reader
        fields = reader.field_scores(query.vector())
        for name in query.plan.classes[:DENSE_CLASS_ROUTES]:
            mask = reader.class_mask(name)
            ids, values = top_positions(scores, query.depth, mask=mask)
            yield make_ranking(RouteKind.DENSE_CLASS, ids, values, reader, name)
            if fields is not None:
                ids, values = top_positions(fields, query.depth, mask=mask)
                yield make_ranking(RouteKind.DENSE_FIELD, ids, values, reader, name)


# -- the keyword side -----------------------------------------------------------------------------------------


class Bm25QuestionRoute:
    """BM25 of the whole question; it runs even when it finds nothing, so every keyword search shows it."""

    stage = side = "bm25"

    def run(self, query: Query) -> Iterator[Ranking]:
        scores = query.question_scores()
        ids, values = top_positions(scores, query.depth, mask=scores > 0)
        yield make_ranking(RouteKind.BM25_QUESTION, ids, values, query.reader,
                           weight=route_weight(RouteKind.BM25_QUESTION, query.plan))


class Bm25ClassRoute:
    """The question without a class's own names, within the class: every chunk of the class carries them, so they
    would only re-rank the class by chunk length."""

    stage = side = "bm25"

    def run(self, query: Query) -> Iterator[Ranking]:
        reader, plan = query.reader, query.plan
        for name in (*plan.classes, *plan.hinted_classes):
            own = reader.class_tokens(name)
            residual = [t for t in query.tokens if t not in own]
            scores = reader.bm25_scores(residual) if residual != query.tokens else query.question_scores()
            yield from _found(RouteKind.BM25_CLASS, scores, reader.class_mask(name) & (scores > 0), query, name)


class Bm25HeadRoute:
    """The member-name field of a named class, so a member *about* the question's words leads."""

    stage = side = "bm25"

    def run(self, query: Query) -> Iterator[Ranking]:
        reader = query.reader
        for name in query.plan.classes[:HEAD_CLASS_ROUTES]:
            scores = reader.head_scores(query.question, drop=reader.class_tokens(name))
            yield from _found(RouteKind.BM25_HEAD, scores, reader.class_mask(name) & (scores > 0), query, name)


class Bm25MemberRoute:
    """The member's name and the question over a named member's chunks, within the named classes when the member
    is one of theirs."""

    stage = side = "bm25"

    def run(self, query: Query) -> Iterator[Ranking]:
        reader, plan = query.reader, query.plan
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
            scores = reader.bm25_scores(reader.tokenize(member) + query.tokens)
            yield from _found(RouteKind.BM25_MEMBER, scores, mask, query, member)


# -- the model's keyword rewrite ------------------------------------------------------------------------------


class DenseRewriteRoute:
    """The rewrite's keywords searched like the whole question, by their vector."""

    stage, side = "rewrite_search", "dense"

    def run(self, query: Query) -> Iterator[Ranking]:
        if not query.keywords:
            return
        vector, _ = query.queries.embed_query(query.keywords)
        _, (ids, values) = nearest_chunks(query.reader, vector, query.depth)
        yield make_ranking(RouteKind.DENSE_REWRITE, ids, values, query.reader)


class Bm25RewriteRoute:
    """The rewrite's keywords searched like the whole question, by BM25."""

    stage, side = "rewrite_search", "bm25"

    def run(self, query: Query) -> Iterator[Ranking]:
        if not query.keywords:
            return
        reader = query.reader
        scores = reader.bm25_scores(reader.tokenize(query.keywords))
        yield from _found(RouteKind.BM25_REWRITE, scores, scores > 0, query)


DEFAULT_ROUTES = tuple(f"{__name__}.{route.__name__}" for route in (
    DenseRoute, DenseClassRoute, Bm25QuestionRoute, Bm25ClassRoute, Bm25HeadRoute, Bm25MemberRoute,
    DenseRewriteRoute, Bm25RewriteRoute))


def load_routes(paths: Iterable[str] = DEFAULT_ROUTES) -> tuple[Route, ...]:
    """One instance of each route named by dotted path ("package.module.Class"), in order; ValueError names a path
    that does not import."""
    routes = []
    for path in paths:
        module_name, _, name = path.rpartition(".")
        try:
            routes.append(getattr(importlib.import_module(module_name), name)())
        except (ImportError, AttributeError, ValueError) as exc:
            raise ValueError(f"route {path!r} does not import: {exc}") from exc
    return tuple(routes)


def nearest_chunks(reader: VersionReader, vector: np.ndarray, depth: int):
    """Every chunk's cosine with `vector` (None for a version searched through LanceDB's ANN index), and the `depth`
    nearest chunks with their cosines, best first: exactly in memory, else through the ANN index."""
    scores = reader.dense_scores(vector)
    return scores, (top_positions(scores, depth) if scores is not None else reader.dense_search(vector, depth))


def _found(kind: RouteKind, scores: np.ndarray, mask: np.ndarray, query: Query, within: str = "") -> Iterator[Ranking]:
    """The ranking of the chunks within `mask` by `scores`, when there is any, weighted for the query's plan."""
    ids, values = top_positions(scores, query.depth, mask=mask)
    if ids:
        yield make_ranking(kind, ids, values, query.reader, within, weight=route_weight(kind, query.plan))


def make_ranking(kind: RouteKind, ids: list[int], scores: list[float], reader: VersionReader,
                 within: str = "", weight: float | None = None) -> Ranking:
    """Build the ranking of one route, named by its kind and the class or member it reads within; its weight is
    the kind's (ROUTE_WEIGHTS) unless given."""
    source = kind.source
    chunks = reader.chunks
    return Ranking(
        name=f"{kind.value}:{within}" if within else kind.value,
        hits=tuple(Hit(chunk=chunks[i], score=s, source=source, rank=n, raw_score=s)
                   for n, (i, s) in enumerate(zip(ids, scores), start=1)),
        kind=kind,
        weight=ROUTE_WEIGHTS[kind] if weight is None else weight,
    )


def elapsed_ms(since: float) -> float:
    """Return the milliseconds since a `time.perf_counter()` reading, to the microsecond."""
    return round((time.perf_counter() - since) * 1000, 3)

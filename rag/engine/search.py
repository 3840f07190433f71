"""Retrieve (E5) and adopt (E6): one vector search, at most 6 BM25 routes, RRF, adoption.

`Searcher` is the engine's public entry for questions: `Searcher(reader, embedder).run(question)`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .adopt import Adopter
from .embed import QueryVectorCache
from .fuse import rrf_fuse
from .index import VersionReader, top_positions
from .plan import Planner
from .text import tokenize
from .types import Hit, Plan, Ranking, SearchResult

MAX_BM25_ROUTES = 6  # seed 001: BM25 runs at most 6 routes
# RRF weight per route kind. Within a named class the vector ranking orders members best; the whole-question
# BM25 route mostly re-ranks a named class by chunk length (its name is in every chunk), so it counts half.
ROUTE_WEIGHTS = {"dense:class": 2.0, "bm25:question": 0.5}
MODES = ("hybrid", "vector", "bm25")


@dataclass(frozen=True, slots=True)
class ChitchatGate:
    """Decide that a question naming no class or member is not about the docs.

    Two signals: how close the nearest chunk is (cosine), and how many of the question's words the
    corpus uses at all. Their sum must clear the similarity of everyday-life probes to this corpus
    (measured at build time, see probes.py) by a margin, so the gate follows the model and corpus.
    """

    margin: float = 0.05
    coverage_weight: float = 0.1

    def is_chitchat(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None) -> bool:
        if plan.classes or plan.hinted_classes or plan.members or offtopic_similarity is None:
            return False
        return best_dense + self.coverage_weight * coverage < offtopic_similarity + self.margin

    def is_weak(self, plan: Plan, best_dense: float, coverage: float, offtopic_similarity: float | None) -> bool:
        """Evidence for a question naming no class or member that is no closer than small talk (no margin):
        an answer from it would be a guess, so it gets "insufficient material" instead."""
        if plan.classes or plan.members or offtopic_similarity is None:
            return False
        return best_dense + self.coverage_weight * coverage < offtopic_similarity


@dataclass
class Searcher:
    """Search one opened index version."""

    reader: VersionReader
    queries: QueryVectorCache
    planner: Planner
    adopter: Adopter = field(default_factory=Adopter)
    gate: ChitchatGate = field(default_factory=ChitchatGate)
    depth: int = 100  # candidates taken from each route before fusion; class sums need depth

    def run(self, question: str, *, mode: str = "hybrid", top_k: int | None = None, exclude=()) -> SearchResult:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        plan = self.planner.run(question)
        timings["plan"] = _ms(started)
        if plan.kind == "out_of_catalog":
            timings["total"] = _ms(started)
            return SearchResult(plan=plan, hits=(), timings_ms=timings, mode=mode, version=self.reader.version)

        reader = self.reader
        rankings: list[Ranking] = []
        lists: list[list[int]] = []
        t0 = time.perf_counter()
        tokens = tokenize(plan.corrected_question)
        bm25_scores = reader.bm25_scores(tokens)
        timings["bm25"] = _ms(t0)

        dense_scores = None
        best_dense = 1.0
        if mode != "bm25" or not (plan.classes or plan.hinted_classes or plan.members):
            t0 = time.perf_counter()
            vector, cached = self.queries.embed_query(plan.corrected_question)
            timings["embed"] = _ms(t0)
            timings["embed_cached"] = cached
            t0 = time.perf_counter()
            dense_scores = reader.dense_scores(vector)
            if dense_scores is not None:
                ids, scores = top_positions(dense_scores, self.depth)
            else:
                ids, scores = reader.dense_search(vector, self.depth)
            best_dense = scores[0] if scores else 0.0
            timings["dense"] = _ms(t0)
            if mode != "bm25":
                lists.append(ids)
                rankings.append(_ranking("dense", ids, scores, reader))
                if dense_scores is not None:
                    # The same vector search read within each named class: a class's members compete
                    # with each other, not with the similar members of every other class.
                    for name in plan.classes[:3]:
                        ids, scores = top_positions(dense_scores, self.depth, mask=reader.class_mask(name))
                        lists.append(ids)
                        rankings.append(_ranking(f"dense:class:{name}", ids, scores, reader))

        coverage = reader.vocabulary_coverage(tokens)
        if self.gate.is_chitchat(plan, best_dense, coverage, reader.manifest.get("offtopic_similarity")):
            plan = _with(plan, kind="chitchat", reason="not a question about this documentation")
            timings["total"] = _ms(started)
            return SearchResult(plan=plan, hits=(), rankings=tuple(rankings), timings_ms=timings, mode=mode,
                                version=reader.version)

        if mode != "vector":
            t0 = time.perf_counter()
            for name, ids, scores in self._bm25_routes(plan, tokens, bm25_scores):
                lists.append(ids)
                rankings.append(_ranking(name, ids, scores, reader))
            timings["bm25"] += _ms(t0)

        t0 = time.perf_counter()
        weights = [ROUTE_WEIGHTS.get(":".join(r.name.split(":")[:2]), 1.0) for r in rankings]
        fused = rrf_fuse(lists, weights=weights)
        timings["fuse"] = _ms(t0)

        t0 = time.perf_counter()
        excluded_ids = {reader.index_of(c) for c in exclude} - {None}
        adopter = self.adopter if top_k is None else Adopter(single=top_k, per_class=self.adopter.per_class)
        classes = list(plan.classes)
        order = [i for i, _ in fused]
        if len(classes) >= 2 and dense_scores is not None:
            # A named class with nothing in the fused lists still gets its best chunks by the vector side.
            for name in classes:
                if not any(reader.chunks[i].class_name == name for i in order):
                    extra, _ = top_positions(dense_scores, adopter.per_class, mask=reader.class_mask(name))
                    order.extend(extra)
        fused_score = dict(fused)
        adopted = adopter.run(order, classes, lambda i: reader.chunks[i].class_name, excluded_ids,
                              scores=fused_score)
        raw = {}
        if dense_scores is not None:
            raw = {i: float(dense_scores[i]) for i in adopted}
        hits = tuple(
            Hit(chunk=reader.chunks[i], score=fused_score.get(i, 0.0), source="rrf", rank=n + 1,
                raw_score=raw.get(i, float(bm25_scores[i])))
            for n, i in enumerate(adopted)
        )
        timings["adopt"] = _ms(t0)
        timings["total"] = _ms(started)
        fused_hits = tuple(
            Hit(chunk=reader.chunks[i], score=s, source="rrf", rank=n + 1) for n, (i, s) in enumerate(fused[:self.depth])
        )
        return SearchResult(
            plan=plan,
            hits=hits,
            rankings=tuple(rankings),
            fused=fused_hits,
            excluded=tuple(reader.chunks[i].chunk_id for i in sorted(excluded_ids)),
            timings_ms=timings,
            mode=mode,
            version=reader.version,
            weak_evidence=dense_scores is not None and self.gate.is_weak(
                plan, best_dense, coverage, reader.manifest.get("offtopic_similarity")),
        )

    def _bm25_routes(self, plan: Plan, tokens: list[str], scores: np.ndarray):
        """Yield (name, ids, scores) for at most MAX_BM25_ROUTES routes: question, classes, class + member.

        A class route scores the question without the class's own names: every chunk of the class
        carries them, so they would only re-rank the class by chunk length.
        """
        reader = self.reader
        routes = 0
        ids, values = top_positions(scores, self.depth, mask=scores > 0)
        yield "bm25:question", ids, values
        routes += 1
        for name in list(plan.classes) + list(plan.hinted_classes):
            if routes >= MAX_BM25_ROUTES:
                return
            own = reader.class_tokens(name)
            residual = [t for t in tokens if t not in own]
            class_scores = reader.bm25_scores(residual) if residual != tokens else scores
            mask = reader.class_mask(name) & (class_scores > 0)
            ids, values = top_positions(class_scores, self.depth, mask=mask)
            if ids:
                yield f"bm25:class:{name}", ids, values
                routes += 1
        for name in plan.classes[:2]:
            if routes >= MAX_BM25_ROUTES:
                return
            head_scores = reader.head_scores(plan.corrected_question, drop=reader.class_tokens(name))
            ids, values = top_positions(head_scores, self.depth, mask=reader.class_mask(name) & (head_scores > 0))
            if ids:
                yield f"bm25:head:{name}", ids, values
                routes += 1
        for member in plan.members:
            if routes >= MAX_BM25_ROUTES:
                return
            member_mask = reader.member_mask(member)
            if plan.classes:
                in_class = np.zeros(len(reader.chunks), dtype=bool)
                for name in plan.classes:
                    in_class |= reader.class_mask(name)
                if (member_mask & in_class).any():
                    member_mask &= in_class
            member_scores = reader.bm25_scores(tokenize(member) + tokens)
            ids, values = top_positions(member_scores, self.depth, mask=member_mask)
            if ids:
                yield f"bm25:member:{member}", ids, values
                routes += 1


def _ranking(name: str, ids: list[int], scores: list[float], reader: VersionReader) -> Ranking:
    return Ranking(
        name=name,
        hits=tuple(Hit(chunk=reader.chunks[i], score=s, source=name.split(":")[0], rank=n + 1, raw_score=s)
                   for n, (i, s) in enumerate(zip(ids, scores))),
    )


def _with(plan: Plan, **changes) -> Plan:
    from dataclasses import replace

    return replace(plan, **changes)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)

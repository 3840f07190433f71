"""The search's steps beside its routes: the chitchat gate, the model's keyword rewrite and the rerank.

They are components of one kind, as the routes (rag.engine.routes) are: a `stage` (what the Searcher times
them as) and `run(query, ...)` on the same `Query` the routes read, so each reads what it needs of the
question (plan, tokens, vector, nearest chunk) computed once. The Searcher holds one of each, the rewrite and
the rerank only when configured (rag.pipeline builds them from settings), and a search may switch those two
off or on (`SearchOptions.rewrite`, `.rerank`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from .gate import EXEMPLAR_VECTORS, ChitchatGate, ExemplarVectors, names_something, weighted_coverage
from .probes import language_gap, offtopic_similarity, same_language
from .rerank import RERANK_CANDIDATES, Reranker, RerankResult
from .rewrite import QueryRewriter, Rewrite
from .routes import Query
from .types import Hit

__all__ = ["GateReading", "GateStep", "RerankStep", "RewriteStep", "Step"]


class Step(Protocol):
    """A search step beside the routes, run on the question's `Query`."""

    stage: ClassVar[str]  # its timing's name in SearchResult.timings_ms

    def run(self, query: Query, *args): ...


@dataclass(frozen=True, slots=True)
class GateReading:
    """What the chitchat gate read of one question; the weak-evidence reading reuses it."""

    chitchat: bool
    coverage: float
    offtopic: float | None
    weighted: float | None


@dataclass(frozen=True)
class GateStep:
    """The chitchat gate (rag.engine.gate) on a question whose vector side ran: small talk stops the search."""

    stage: ClassVar[str] = "gate"
    gate: ChitchatGate = field(default_factory=ChitchatGate)
    exemplars: ExemplarVectors = field(default_factory=lambda: EXEMPLAR_VECTORS, repr=False)  # once per model

    def run(self, query: Query) -> GateReading | None:
        """Read the gate's signals; None when the vector side did not run (nothing to compare)."""
        plan, reader = query.plan, query.reader
        if not query.embedded:
            return None
        offtopic = offtopic_similarity(reader.manifest, plan.question)
        coverage = reader.vocabulary_coverage(query.tokens)
        exemplar = weighted = None
        if not names_something(plan):
            weighted = weighted_coverage(query.tokens, reader.document_frequency, reader.bm25_count)
            # A question in another language than the corpus's (Chinese over an English reference) sits farther
            # from every chunk than from any sentence of its own language: its nearness to an exemplar counts
            # less by the gap the probes measured between the two languages at build time.
            exemplar = (self.exemplars.similarity(query.queries.embedder, query.vector())
                        - language_gap(reader.manifest, plan.question))
        chitchat = self.gate.is_chitchat(plan, query.best_similarity, coverage, offtopic,
                                         exemplar_similarity=exemplar, weighted_coverage=weighted,
                                         same_language=same_language(reader.manifest, plan.question))
        return GateReading(chitchat=chitchat, coverage=coverage, offtopic=offtopic, weighted=weighted)

    def weak(self, query: Query, reading: GateReading | None) -> bool:
        """Whether the evidence of a question naming nothing is no closer than small talk (rag.engine.gate)."""
        if reading is None:
            return False
        return self.gate.is_weak(query.plan, query.best_similarity, reading.coverage, reading.offtopic,
                                 weighted_coverage=reading.weighted)


@dataclass(frozen=True)
class RewriteStep:
    """The model's search keywords for the question (rag.engine.rewrite); the rewrite routes search them."""

    stage: ClassVar[str] = "rewrite"
    rewriter: QueryRewriter

    def run(self, query: Query) -> Rewrite:
        rewritten = self.rewriter.run(query.question)
        query.keywords = rewritten.keywords
        return rewritten


@dataclass(frozen=True)
class RerankStep:
    """Reorder the best fused candidates (E11) with a reranker (rag.engine.rerank)."""

    stage: ClassVar[str] = "rerank"
    reranker: Reranker
    candidates: int = RERANK_CANDIDATES  # fused chunks the reranker reorders

    def run(self, query: Query, fused: list[tuple[int, float]],
            excluded: set[int]) -> tuple[list[tuple[int, float]], RerankResult]:
        """Rerank the best `candidates` fused chunks not excluded; the rest follow in fused order."""
        reader = query.reader
        chosen = [(i, s) for i, s in fused if i not in excluded][: self.candidates]
        result = self.reranker.run(query.question, [Hit(chunk=reader.chunks[i], score=s, source="rrf", rank=n)
                                                    for n, (i, s) in enumerate(chosen, start=1)])
        if result.backend == "none":
            return fused, result
        order = [(reader.index_of(h.chunk.chunk_id), h.score) for h in result.hits]
        placed = {i for i, _ in order}
        return order + [pair for pair in fused if pair[0] not in placed], result

"""Where the expected member goes (issue 34): the engine's stages beside a plain hybrid retriever.

For one question with expected members, `diagnose` reads the member chunk's rank in
- a plain hybrid retriever over the same chunks and vectors: one cosine ranking over every chunk and one BM25
  ranking of the whole question, fused by RRF with equal weights (what LlamaIndex's hybrid retriever does);
- the engine's fused order (every route, before adoption) and within its own class there;
- the engine's adopted evidence (what a search returns);
and names the stage that cost the member its place in the first 3:
  hit        the engine has it in its first 3;
  planner    the plan refused the question (out of catalog or chitchat);
  adoption   it was in the fused first 3 and adoption moved it down (the spread over classes, the class cap);
  order      its class (page) is in the engine's first 3 but other chunks of that class rank above it;
  routes     the fused order has it below the first 3 and its class is not in the first 3 either;
  recall     it is in neither the fused depth nor the engine's evidence.

`bench/retrieval.py` and `bench/formats/bench.py` print the plain retriever's member hit@3 beside the engine's
and the count per stage (`stage_counts`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from rag.engine.embed import QueryVectorCache
from rag.engine.fuse import rrf_fuse
from rag.engine.index import VersionReader, top_positions
from rag.engine.routes import make_ranking
from rag.engine.types import RouteKind, SearchOptions

STAGES = ("hit", "planner", "adoption", "order", "routes", "recall")
DEPTH = 100  # candidates per ranking, as the engine's routes take


@dataclass
class PlainHybrid:
    """Cosine over every chunk and BM25 of the whole question, fused by RRF with equal weights."""

    reader: VersionReader
    queries: QueryVectorCache  # the engine's own question vectors

    def run(self, question: str, k: int = DEPTH) -> list[int]:
        reader = self.reader
        vector, _ = self.queries.embed_query(question)
        ids, values = reader.dense_search(vector, k)  # in memory, or through the ANN index
        rankings = [make_ranking(RouteKind.DENSE, ids, values, reader)]
        bm25 = reader.bm25_scores(reader.tokenize(question))
        ids, values = top_positions(bm25, k, mask=bm25 > 0)
        if ids:
            rankings.append(replace(make_ranking(RouteKind.BM25_QUESTION, ids, values, reader), weight=1.0))
        return [reader.index_of(chunk_id) for chunk_id, _ in rrf_fuse(rankings)][:k]


def first_rank(chunks, is_member: Callable) -> int | None:
    """The 1-based rank of the first chunk that is the expected member, None when none is."""
    return next((n for n, chunk in enumerate(chunks, start=1) if is_member(chunk)), None)


def diagnose(searcher, plain: PlainHybrid, question: str, is_member: Callable, is_page: Callable) -> dict:
    """The member's ranks through the engine and the plain retriever, and the stage that cost it the first 3."""
    reader = searcher.reader
    result = searcher.run(question, SearchOptions(top_k=30))
    adopted = [h.chunk for h in result.hits]
    fused = [h.chunk for h in result.fused]
    plain_chunks = [reader.chunks[i] for i in plain.run(question)]
    engine_rank = first_rank(adopted, is_member)
    fused_rank = first_rank(fused, is_member)
    row = {"plan": result.plan.kind, "classes": list(result.plan.classes), "engine_rank": engine_rank,
           "fused_rank": fused_rank, "plain_rank": first_rank(plain_chunks, is_member),
           "page_in_3": any(is_page(c) for c in adopted[:3])}
    if engine_rank is not None and engine_rank <= 3:
        row["stage"] = "hit"
    elif result.plan.kind != "doc":
        row["stage"] = "planner"
    elif fused_rank is not None and fused_rank <= 3:
        row["stage"] = "adoption"
    elif row["page_in_3"] and (fused_rank is not None or engine_rank is not None):
        row["stage"] = "order"
    elif fused_rank is not None or engine_rank is not None:
        row["stage"] = "routes"
    else:
        row["stage"] = "recall"
    return row


def stage_counts(rows: list[dict]) -> dict[str, int]:
    counts = Counter(row["stage"] for row in rows)
    return {stage: counts.get(stage, 0) for stage in STAGES}


def member_hit3(rows: list[dict], rank: str = "plain_rank") -> float | None:
    """The share of diagnosed questions whose member is in the first 3 by `rank` ("plain_rank", "engine_rank")."""
    return round(sum(1 for r in rows if r[rank] is not None and r[rank] <= 3) / len(rows), 3) if rows else None

"""Reciprocal rank fusion (Cormack, Clarke and Buettcher, SIGIR 2009)."""

from __future__ import annotations

from collections.abc import Sequence

from .types import Ranking

RRF_K = 60  # the constant from Cormack et al. (2009)


def rrf_fuse(rankings: Sequence[Ranking], *, k: int = RRF_K) -> list[tuple[str, float]]:
    """Fuse rankings into (chunk id, score), best first: score(d) = sum of ranking weight / (k + rank), rank from 1."""
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for list_no, ranking in enumerate(rankings):
        weight = ranking.weight
        for rank, hit in enumerate(ranking.hits, start=1):
            item = hit.chunk.chunk_id
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
            first_seen.setdefault(item, (rank, list_no))
    # Ties break on the best single rank, then on list order, so fusion is deterministic.
    return sorted(scores.items(), key=lambda pair: (-pair[1], first_seen[pair[0]]))
